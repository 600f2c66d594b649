"""One module per ``spearbench`` subcommand (see :mod:`spear_metrics.cli`)."""


def parse_options(pairs: list[str] | None) -> dict:
    """``["k=v", ...]`` -> ``{k: v}`` with ints, floats, booleans and ``none`` converted.

    Raises:
        SystemExit: a pair without ``=`` (argparse-style one-line error).
    """
    out = {}
    for pair in pairs or []:
        if "=" not in pair:
            raise SystemExit(f"option {pair!r} is not KEY=VALUE")
        k, v = pair.split("=", 1)
        low = v.strip().lower()
        if low in ("true", "false"):
            val: object = low == "true"
        elif low in ("none", "null"):
            val = None
        else:
            try:
                val = int(v)
            except ValueError:
                try:
                    val = float(v)
                except ValueError:
                    val = v
        out[k.strip().replace("-", "_")] = val
    return out
