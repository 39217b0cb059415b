"""Malformed requests to kcoral-server, as data (cases.py), and the test that sends them."""
