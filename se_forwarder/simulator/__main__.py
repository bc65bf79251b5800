"""``python -m se_forwarder.simulator``: the same as ``se-forwarder simulate``."""

from se_forwarder.cli.simulate import simulate_command

if __name__ == "__main__":
    simulate_command.main(prog_name="python -m se_forwarder.simulator")
