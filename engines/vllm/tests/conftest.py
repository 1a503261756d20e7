"""pytest set-up of the connector tests: the tests import harness/delay_proxy from this
folder and kvstash_vllm from engines/vllm (no install needed)."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
