"""`<metrics>`: where Artemis puts a metrics plugin, read for the Prometheus endpoint."""

from __future__ import annotations

import pytest
from conftest import WriteConfig

from broker_core.config import load_config
from broker_core.config.errors import ConfigError

SEC = "<security-enabled>false</security-enabled>\n"
OURS = "org.amqp_mirror.metrics.PrometheusMetricsPlugin"


def plugin(class_name: str = OURS, properties: str = "") -> str:
    return f'<metrics><plugin class-name="{class_name}">{properties}</plugin></metrics>'


def test_no_metrics_element_serves_nothing(write_config: WriteConfig) -> None:
    config, _ = load_config(write_config(SEC))
    assert not config.metrics.enabled


def test_our_plugin_with_its_properties(write_config: WriteConfig) -> None:
    props = (
        '<property key="host" value="0.0.0.0"/><property key="port" value="9500"/>'
        '<property key="queues" value="orders,billing.#"/><property key="max-queues" value="20"/>'
        '<property key="mirror-rpo-seconds" value="30"/><property key="mirror-behind-seconds" value="5.5"/>'
    )
    config, warnings = load_config(write_config(SEC + plugin(properties=props)))
    m = config.metrics
    assert (m.enabled, m.host, m.port, m.queues, m.max_queues) == (
        True,
        "0.0.0.0",
        9500,
        "orders,billing.#",
        20,
    )
    assert (m.mirror_rpo_seconds, m.mirror_behind_seconds) == (30.0, 5.5)
    assert not warnings


@pytest.mark.parametrize(
    "class_name",
    [
        "com.redhat.amq.broker.core.server.metrics.plugins.ArtemisPrometheusMetricsPlugin",
        "org.apache.activemq.artemis.core.server.metrics.plugins.ArtemisPrometheusMetricsPlugin",
    ],
)
def test_artemis_prometheus_plugin_is_served_with_the_defaults(
    write_config: WriteConfig, class_name: str
) -> None:
    config, _ = load_config(write_config(SEC + plugin(class_name)))
    assert config.metrics.enabled and (config.metrics.host, config.metrics.port) == ("127.0.0.1", 9404)


def test_another_plugin_is_not_implemented_yet(write_config: WriteConfig) -> None:
    logging = "org.apache.activemq.artemis.core.server.metrics.plugins.LoggingMetricsPlugin"
    with pytest.raises(ConfigError) as info:
        load_config(write_config(SEC + plugin(logging)))
    [error] = [str(p) for p in info.value.problems]
    assert "LoggingMetricsPlugin is not implemented yet; refused" in error
    assert "ArtemisPrometheusMetricsPlugin" in error  # what is


def test_jvm_meters_have_no_effect_here(write_config: WriteConfig) -> None:
    body = SEC + f'<metrics><jvm-memory>true</jvm-memory><plugin class-name="{OURS}"/></metrics>'
    config, notes = load_config(write_config(body))
    assert config.metrics.enabled
    assert [(n.severity, n.element_path) for n in notes] == [("note", "core/metrics/jvm-memory")]
    assert "has no effect here: no JVM runs this broker" in notes[0].message


@pytest.mark.parametrize(
    ("prop", "expected"),
    [
        ('<property key="port" value="99999"/>', "port: integer 99999 out of range"),
        ('<property key="max-queues" value="many"/>', "max-queues: bad integer 'many'"),
        ('<property key="mirror-rpo-seconds" value="0"/>', "mirror-rpo-seconds: 0.0 seconds"),
    ],
)
def test_bad_property_values_are_errors(write_config: WriteConfig, prop: str, expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(write_config(SEC + plugin(properties=prop)))
    assert any(expected in str(p) for p in info.value.problems), [str(p) for p in info.value.problems]


def test_a_misspelt_element_in_metrics_is_an_error(write_config: WriteConfig) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(write_config(SEC + f'<metrics><plugn class-name="{OURS}"/></metrics>'))
    assert any("did you mean <plugin>" in str(p) for p in info.value.problems)


def test_an_unknown_property_is_an_error_naming_the_closest(write_config: WriteConfig) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(write_config(SEC + plugin(properties='<property key="prot" value="1"/>')))
    [error] = [str(p) for p in info.value.problems]
    assert "unknown metrics property 'prot' (did you mean port?)" in error
