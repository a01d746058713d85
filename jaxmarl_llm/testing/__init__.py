"""Test and benchmark doubles; library code never imports this package.

:mod:`jaxmarl_llm.testing.fault_server`: HTTP fault injection for the local
OpenAI-compatible server, and an ``echo`` backend that needs no model.
"""
