"""Reading pycep-parser's trees of the Bicep files: an expression as compact text, a loop's header,
a resource's or module's body inside its loop or condition. Shared by the Bicep tests."""

from __future__ import annotations

import json
from typing import Any


def expr(node: Any) -> str:
    """A pycep expression tree as compact Bicep-like text: `identities.outputs.agentIds[i]`."""
    if not isinstance(node, dict):
        return str(node)
    if "operator" in node:
        op = node["operator"]
        operands = list(op["operands"].values())
        if op["type"] == "property_accessor":
            return f"{expr(operands[0])}.{expr(operands[1])}"
        if op["type"] == "index_accessor":
            return f"{expr(operands[0])}[{expr(operands[1])}]"
        if op["type"] == "not":
            return f"!{expr(operands[0])}"
        return f"{op['type']}({', '.join(expr(o) for o in operands)})"
    if "function" in node:
        fn = node["function"]
        args = [expr(a) for a in (fn.get("parameters") or {}).values() if a is not None]
        return f"{fn['type']}({', '.join(args)})"
    return json.dumps(node, sort_keys=True)


def loop(node: dict) -> str | None:
    """`item in array` or `(item, index) in array` for a looped resource, module or output value."""
    loop_type = node.get("loop_type") or node.get("config", {}).get("loop_type")
    if not loop_type:
        return None
    d = loop_type["detail"]
    if "index_name" in d:
        return f"({d['item_name']}, {d['index_name']}) in {d['array_name']}"
    return f"{d['item_name']} in {d['array_name']}"


def module_body(module: dict) -> dict:
    """A module's name/params/scope, inside its loop or condition if it has one."""
    cfg = module["config"]
    return cfg["config"] if "loop_type" in cfg or "condition" in cfg else cfg
