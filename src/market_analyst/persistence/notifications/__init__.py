"""Notifications: the event outbox and its deliveries in the records database (`store.py`), the job
queue that delivers them (`delivery.py`, procrastinate) and the signed webhook (`webhook.py`)."""
