"""The process shell: the composition root above every layer.

It is the only package that knows every kind of part. `broker` wires one server to its listeners,
broker connections, mirror and management; `runtime` runs servers on one event loop under signals and
systemd; `cli` is the `amqp-mirror` command; `demo` the two-data-centre demo.
"""
