from django.urls import path
from orders import views

urlpatterns = [
    path("orders", views.checkout),
    path("tasks/<str:task_id>", views.task_status),
]
