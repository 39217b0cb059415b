"""End-to-end tests of kcoral-server through HTTP and the kcoral client."""
