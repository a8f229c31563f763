"""amqp."""
