"""Operations: what an operator and their tools see of a running broker from outside.

Metrics for Prometheus (metrics.py, served with the health checks by endpoint.py), systemd's protocol
(systemd.py), the reload on SIGHUP (reload.py), state changes as log lines (watch.py, logs.py) and the
`amqp-mirror status` command (status.py). Everything here reads the broker's parts and their counters;
nothing here runs per message.
"""
