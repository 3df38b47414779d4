"""Shared fixtures of the policy suite: the built programs and the data in ../shared."""
import os
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = ROOT / os.environ.get("KGYM_BUILD", "build")
SHARED = ROOT.parent / "shared"


@pytest.fixture(scope="session")
def kgym_policy():
    """Path of the built kgym-policy CLI (make builds it before the suites run)."""
    p = BUILD / "kgym-policy"
    assert p.exists(), f"{p} is not built: run make"
    return str(p)


@pytest.fixture(scope="session")
def qwen3_tokenizer_dir():
    """The real Qwen3 tokenizer (tokenizer.json, tokenizer_config.json) beside the checkout."""
    d = SHARED / "tokenizers" / "qwen3"
    assert (d / "tokenizer.json").exists(), f"{d}/tokenizer.json is missing: ../shared must be beside the checkout"
    return d
