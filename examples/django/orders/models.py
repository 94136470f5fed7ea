from django.db import models


class Order(models.Model):
    email = models.CharField(max_length=200, unique=True)  # one open order per address
