"""The ``omni`` command: its commands (``main`` and one module per command
group), the options they share (``options``), where it prints (``console``)
and what it prints, as functions returning text (``render``). User errors
(``OmniError``) are caught here, once. Layer: cli, the top.
"""
