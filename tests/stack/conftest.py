"""Stack tests share the isolated environment and stack fixtures of the render tests."""

from tests.render.conftest import default_stack, empty_env_file, isolated, stub_dir

__all__ = ["default_stack", "empty_env_file", "isolated", "stub_dir"]
