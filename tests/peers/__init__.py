"""Real foreign AMQP 1.0 peers for integration tests and benchmarks.

Each peer starts on free loopback ports inside a directory the caller owns (a pytest ``tmp_path``)
and is a context manager that always stops it and kills leftovers:

- ``rabbitmq.running_rabbitmq(workdir)``: a private RabbitMQ 3.10 node with the AMQP 1.0 plugin.
- ``protonc.running_proton_broker(workdir)``: the Qpid Proton C example broker (built on demand).
- ``rhea.Rhea()``: Node.js rhea clients (``tests/node/send.js`` / ``receive.js``).

Every module has an ``availability() -> (bool, why)`` check; ``tests/conftest.py`` turns a missing peer
into a skip on a laptop and a failure in CI.
"""
