"""Integrations of jobsup with frameworks, each in its own subpackage and extra
(`jobsup.contrib.django`: ``pip install 'jobsup[django]'``)."""
