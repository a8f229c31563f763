"""High availability: primary/backup pairs (states.py: the state machine; shared_store.py: the node
manager over the shared data directory's lock files). The composition root runs them (amqp_mirror/ha.py)."""
