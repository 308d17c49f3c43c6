"""Auth settings: the documented secure example loads, and half-given credentials are refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from ferrymq.broker.config import BrokerConfig, ConfigError
from ferrymq.namesrv.config import NamesrvConfig

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "broker-secure.toml"


def test_the_secure_example_turns_auth_on():
    config = BrokerConfig.load(EXAMPLE)
    assert config.auth_enabled and config.init_username == "rocketmq2"
    assert config.inner_credentials == ("rocketmq2", "change-me")
    assert not BrokerConfig().auth_enabled and not NamesrvConfig().auth_enabled  # off by default


def test_credentials_come_in_pairs(tmp_path):
    with pytest.raises(ConfigError, match="go together"):
        BrokerConfig.from_settings({"init_username": "root"})
    with pytest.raises(ConfigError, match="go together"):
        BrokerConfig.from_settings({"inner_client_access_key": "x"})
    with pytest.raises(ValueError, match="go together"):
        NamesrvConfig(init_password="x")
    assert NamesrvConfig(kv_config_path=tmp_path / "kv.json").auth_path == tmp_path / "auth.json"
