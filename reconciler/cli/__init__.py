"""The command line: argparse, commands, watch, completion."""
