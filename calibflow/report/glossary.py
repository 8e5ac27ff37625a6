"""One line per calibration method and where it comes from: the report's glossary."""

from __future__ import annotations

from calibflow.report.chrome import e


def __getattr__(name: str):
    # METHODS: method -> (what it does, in one line; the reference), each class's own ``glossary`` fact
    if name == "METHODS":
        from calibflow.calibrators import glossary

        return glossary()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def render_glossary(methods: list[str]) -> str:
    """The glossary section: every method the page mentions (and identity), one line each."""
    from calibflow.calibrators import glossary

    lines = glossary()
    names = ["identity", *[m for m in methods if m != "identity"]]
    rows = "".join(
        f'<tr><td class="l"><code>{e(m)}</code></td><td class="l">{e(lines[m][0])}</td>'
        f'<td class="l"><small>{e(lines[m][1])}</small></td></tr>'
        for m in names
        if m in lines
    )
    return (
        '<section id="glossary"><h2>Methods</h2><div class="wide"><table><thead><tr><th class="l">method</th>'
        '<th class="l">what it does</th><th class="l">reference</th></tr></thead>'
        f"<tbody>{rows}</tbody></table></div></section>"
    )
