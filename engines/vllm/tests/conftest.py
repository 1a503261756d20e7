"""pytest set-up of the connector tests: the tests import harness/delay_proxy from this
folder and kvstash_vllm from engines/vllm (no install needed); `logdir` is where the
engines and servers write their logs ($KVSTASH_VLLM_TEST_LOGS, else a temporary folder)."""
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))


@pytest.fixture(scope="session")
def logdir(tmp_path_factory):
    d = os.environ.get("KVSTASH_VLLM_TEST_LOGS") or str(tmp_path_factory.mktemp("logs"))
    os.makedirs(d, exist_ok=True)
    return d
