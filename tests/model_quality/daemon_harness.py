# Shared by the checks that run tandemd on the default model (serving_check.py, soak_check.py):
# their command line, the daemon tests' Client/Daemon helpers, and the model.
import argparse
import os
import sys
import tempfile

from quant_ladder import SOURCE_DIR, find_model, skip


def setup(doc, name):
    """Parses --tandemd/--tandem-model; returns (e2e module ready to start daemons, model path).
    Exits 77 (skipped) without msgpack or without the model."""
    ap = argparse.ArgumentParser(description=doc)
    ap.add_argument("--tandemd", required=True)
    ap.add_argument("--tandem-model", required=True)
    a = ap.parse_args()
    sys.path.insert(0, os.path.join(SOURCE_DIR, "tests", "daemon"))
    try:
        import e2e_test as e2e  # the daemon tests' Client and Daemon (needs msgpack)
    except ImportError as err:
        skip(f"{sys.executable}: {err}")
    model = find_model()
    e2e.ARGS = a
    e2e.TMP = tempfile.mkdtemp(prefix="tandem-%s." % name)
    return e2e, model
