"""Imported late by test_vllm_plugin to exercise when_imported."""

VALUE = 1
