"""Artemis-format broker.xml: load, validate, and expose as immutable models.

cfg, warnings = load_config("etc/broker.xml")   # raises ConfigError listing every problem
"""

from broker_core.config.errors import ConfigError, ConfigProblem
from broker_core.config.model import (
    Acceptor,
    AddressConfig,
    AddressSettings,
    AmqpConnection,
    BrokerConfig,
    MirrorSettings,
    QueueConfig,
    SecuritySetting,
)
from broker_core.config.parser import load_config
from broker_core.vocabulary import RoutingType

__all__ = [
    "Acceptor",
    "AddressConfig",
    "AddressSettings",
    "AmqpConnection",
    "BrokerConfig",
    "ConfigError",
    "ConfigProblem",
    "MirrorSettings",
    "QueueConfig",
    "RoutingType",
    "SecuritySetting",
    "load_config",
]
