"""Allow-list sanitiser for the SVG figures the report inlines.

The report's own figures come from matplotlib, which escapes text; the papers' figures are read back from
``reports/reproductions/<key>.json``, a file anyone with write access to the workspace can edit. Every SVG
is therefore parsed and rebuilt from an allow-list before it is inlined: only drawing elements survive
(no ``script``, ``foreignObject``, ``iframe``, ``a``, ``image``), no event attributes (``on*``), no
reference outside the document (``href`` must start with ``#``, ``url(...)`` must point at ``#id``), and
no DOCTYPE or entity declarations (which could expand or fetch). Anything unparseable is dropped whole.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

SVG_NS = "http://www.w3.org/2000/svg"
XLINK_NS = "http://www.w3.org/1999/xlink"
ET.register_namespace("xlink", XLINK_NS)

#: Drawing elements matplotlib (and any plain chart) uses; nothing that runs code or loads a resource.
ALLOWED_TAGS = frozenset(
    (  # noqa: SIM905 (a word list reads better than 25 quoted strings)
        "svg g defs path rect circle ellipse line polyline polygon text tspan title desc clipPath use "
        "style linearGradient radialGradient stop pattern mask marker symbol"
    ).split()
)
#: Presentation and geometry attributes; ``href`` is allowed only as a same-document reference.
ALLOWED_ATTRS = frozenset(
    (  # noqa: SIM905
        "id class style transform d x y x1 y1 x2 y2 cx cy r rx ry width height viewBox points fill "
        "fill-opacity fill-rule stroke stroke-width stroke-opacity stroke-linecap stroke-linejoin "
        "stroke-dasharray stroke-dashoffset stroke-miterlimit opacity clip-path clip-rule clipPathUnits mask "
        "font-family font-size font-weight font-style text-anchor dominant-baseline alignment-baseline "
        "letter-spacing offset stop-color stop-opacity gradientUnits gradientTransform patternUnits "
        "patternTransform markerWidth markerHeight refX refY orient markerUnits preserveAspectRatio version "
        "href type"
    ).split()
)
_URL = re.compile(r"url\(\s*(['\"]?)(.*?)\1\s*\)", re.IGNORECASE)
_BAD_CSS = re.compile(r"@import|expression\s*\(|javascript:|behavior\s*:|-moz-binding", re.IGNORECASE)
_DECL = re.compile(r"<!(DOCTYPE|ENTITY)", re.IGNORECASE)


class UnsafeSvg(ValueError):
    """The text is not an SVG document the report can inline."""


def _local(name: str) -> tuple[str | None, str]:
    if name.startswith("{"):
        ns, _, local = name[1:].partition("}")
        return ns, local
    return None, name


def _css_ok(text: str) -> bool:
    """No imports, scripts or external ``url(...)`` in a style value or ``<style>`` block."""
    if _BAD_CSS.search(text):
        return False
    return all(m.group(2).startswith("#") for m in _URL.finditer(text))


def _clean_attrs(el: ET.Element) -> None:
    for name in list(el.attrib):
        ns, local = _local(name)
        value = el.attrib[name]
        keep = (
            ns in (None, XLINK_NS)
            and local in ALLOWED_ATTRS
            and (local != "href" or value.startswith("#"))
            and _css_ok(value)
            and "javascript:" not in value.lower()
        )
        if not keep:
            del el.attrib[name]


def _clean(el: ET.Element) -> None:
    for child in list(el):
        ns, local = _local(child.tag) if isinstance(child.tag, str) else (None, "")
        ok = ns == SVG_NS and local in ALLOWED_TAGS
        if ok and local == "style" and not _css_ok(child.text or ""):
            ok = False
        if not ok:
            tail = child.tail
            el.remove(child)
            if tail and tail.strip():
                el.text = (el.text or "") + tail  # keep the text that followed, as text
            continue
        _clean_attrs(child)
        _clean(child)


def sanitize_svg(text: str) -> str:
    """``text`` rebuilt from the allow-list; raises ``UnsafeSvg`` when it is not a parseable SVG.

    Comments and processing instructions are dropped by the parser; text content is re-escaped on
    output, so ``</svg><script>`` inside a title stays text.
    """
    if _DECL.search(text):
        raise UnsafeSvg("SVG with a DOCTYPE or ENTITY declaration")
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        raise UnsafeSvg(f"not well-formed SVG: {exc}") from None
    if root.tag != f"{{{SVG_NS}}}svg":
        raise UnsafeSvg(f"root element is {root.tag!r}, not svg")
    _clean_attrs(root)
    _clean(root)
    for el in root.iter():  # plain tag names and one xmlns, as inline SVG in HTML is written
        el.tag = _local(el.tag)[1]
    root.set("xmlns", SVG_NS)
    return ET.tostring(root, encoding="unicode")
