"""The API server's static cost estimate of a DRA selector: cel-go's estimator with DRA's size hints.

Called by the compiler (``compiler.py``) for every checked selector. The API server refuses a
new selector whose worst-case estimate exceeds ``resource.CELSelectorExpressionMaxCost``
(1,000,000) with ``Forbidden: too complex, exceeds cost limit`` (``validate_selector`` in
``environment.py``), so explain must reach the same number. This module follows
``checker/cost.go`` of the cel-go release the Kubernetes release builds in (v0.26 up to 1.36,
v0.29 from 1.37) node by node: per-node costs (identifiers and selections 1, list literals 10,
map literals 30, calls 1 unless sized), size estimates carried through the tree (literals,
list and map entries, comprehension ranges, ``+`` of strings and lists, ``split``/``findAll``
results), and for each overload of a call the libraries' estimates (``estimate_library.py``)
before cel-go's defaults. Sizes the expression cannot know come from DRA's declaration of
``device`` (``costmath.py``): a driver name has at most 63 characters, a domain 63, an attribute
or capacity name 32, an attribute value 64 (string length or, with list-type attributes, list
length), each map at most 32 entries. The Kubernetes releases differ only where the cel-go
release does (``Environment``).

``bound=True`` gives what the compiler uses to decide whether a selector needs its run-time cost
metered (see ``metered.py``): the same estimate, but charging every selection and every
qualification of a computed value, as cel-go's interpreter does even where its estimator does not
(a field selected from a ``dyn`` value, an index into a call's result).
"""

from __future__ import annotations

from dra_driver.schedsim.cel import types
from dra_driver.schedsim.cel.checker import Checked
from dra_driver.schedsim.cel.costmath import (
    ACCUMULATORS,
    CONST_COST,
    LIST_CREATE_BASE_COST,
    MAP_CREATE_BASE_COST,
    REGEX_STRING_LENGTH_COST_FACTOR,
    SELECT_AND_IDENT_COST,
    STRING_TRAVERSAL_COST_FACTOR,
    U64,
    UNKNOWN,
    Est,
    Node,
    add_u64,
    dra_size,
    e_add,
    e_factor,
    e_mul,
    e_union,
    fixed,
)
from dra_driver.schedsim.cel.estimate_library import extension_cost, kubernetes_cost
from dra_driver.schedsim.cel.estimate_sizes import Entry, Environment, Local, cel_kind, is_scalar, literal_size
from dra_driver.schedsim.cel.nodes import Call, Comprehension, CreateList, CreateMap, Expr, Ident, Literal, Select

_STRING_COMPARISONS = frozenset(
    f"{op}_{t}" for op in ("less", "greater", "less_equals", "greater_equals") for t in ("string", "bytes")
) | {"equals", "not_equals"}


class Coster:
    """One estimate of one checked expression (cel-go's ``coster``)."""

    def __init__(self, checked: Checked, env: Environment) -> None:
        self.checked = checked
        self.env = env
        self.paths: dict[int, list[str]] = {}
        self.locals: dict[str, list[Local]] = {}
        self.sizes: dict[int, Est] = {}
        self.entries: dict[int, Entry] = {}

    # -- bookkeeping --------------------------------------------------------------------------------
    def type_of(self, e: Expr) -> types.Type:
        return self.checked.types.get(e.id, types.DYN)

    def peek(self, name: str) -> Local | None:
        stack = self.locals.get(name)
        return stack[-1] if stack else None

    def push(self, name: str, path: list[str], size: Est | None, entry: Entry | None) -> None:
        self.locals.setdefault(name, []).append(Local(path, size, entry))

    def pop(self, name: str) -> None:
        self.locals[name].pop()

    def get_path(self, e: Expr) -> list[str]:
        if isinstance(e, Ident):
            v = self.peek(e.name)
            if v is not None:
                return list(v.path)
        return list(self.paths.get(e.id, []))

    def node(self, e: Expr) -> Node:
        path: list[str] | None = self.get_path(e)
        if path and path[0] in ACCUMULATORS:
            path = None  # only paths to root variables; not the accumulators'
        return Node(path, self.type_of(e), e, self.size(e))

    def estimate_size(self, n: Node) -> Est | None:
        """The Kubernetes estimator's ``EstimateSize``: DRA's size hints."""
        return dra_size(n.path, self.env.device)

    def size_estimate(self, n: Node) -> Est:
        """The Kubernetes library's ``sizeEstimate``: computed, declared, else unknown."""
        if n.computed is not None:
            return n.computed
        return self.estimate_size(n) or UNKNOWN

    def size(self, e: Expr) -> Est | None:  # noqa: PLR0911 - one return per source of a size, as cel-go's computeSize
        """``computeSize``."""
        hit = self.sizes.get(e.id)
        if hit is not None:
            return hit
        if isinstance(e, Literal):
            s = literal_size(e.value)
            if s is not None:
                return s
        elif isinstance(e, CreateList):
            return fixed(len(e.elements))
        elif isinstance(e, CreateMap):
            return fixed(len(e.entries))
        declared = dra_size(self.get_path(e), self.env.device)
        if declared is not None:
            self.sizes[e.id] = declared
            return declared
        if is_scalar(self.type_of(e)):
            return fixed(1)
        if isinstance(e, Ident):
            v = self.peek(e.name)
            if v is not None and v.size is not None:
                return v.size
        return None

    def size_or_unknown(self, e: Expr) -> Est:
        s = self.size(e)
        return UNKNOWN if s is None else s

    def set_size(self, e: Expr, s: Est | None) -> None:
        if s is not None:
            self.sizes[e.id] = s

    def entry(self, e: Expr) -> Entry | None:
        """``computeEntrySize``."""
        hit = self.entries.get(e.id)
        if hit is not None:
            return hit
        if isinstance(e, Ident):
            v = self.peek(e.name)
            if v is not None and v.entry is not None:
                return v.entry
        return None

    def set_entry(self, e: Expr, s: Entry | None) -> None:
        if s is not None:
            self.entries[e.id] = s

    def copy_sizes(self, dst: Expr, src: Expr) -> None:
        self.set_size(dst, self.size(src))
        self.set_entry(dst, self.entry(src))

    # -- nodes ------------------------------------------------------------------------------------
    def cost(self, e: Expr) -> Est:  # noqa: PLR0911 - one branch per expression kind, as cel-go's coster
        if isinstance(e, Literal):
            return fixed(CONST_COST)
        if isinstance(e, Ident):
            v = self.peek(e.name)
            self.paths[e.id] = list(v.path) if v is not None else [e.name]
            return fixed(SELECT_AND_IDENT_COST)
        if isinstance(e, Select):
            return self.cost_select(e)
        if isinstance(e, Call):
            return self.cost_call(e)
        if isinstance(e, CreateList):
            return self.cost_list(e)
        if isinstance(e, CreateMap):
            return self.cost_map(e)
        if isinstance(e, Comprehension):
            return self.cost_bind(e) if self.is_bind(e) else self.cost_comprehension(e)
        return 0, 0

    def cost_select(self, e: Select) -> Est:
        if e.test_only:
            return e_add((0, 0), self.cost(e.operand))  # presence tests cost nothing (PresenceTestHasCost(false))
        total = self.cost(e.operand)
        if self.env.bound:
            total = e_add(total, fixed(SELECT_AND_IDENT_COST + (0 if self.is_attribute(e.operand) else 1)))
        elif cel_kind(self.type_of(e.operand)) in (types.MAP_KIND, types.STRUCT_KIND, types.TYPE_PARAM_KIND):
            total = e_add(total, fixed(SELECT_AND_IDENT_COST))
        self.paths[e.id] = [*self.get_path(e.operand), e.field]
        return total

    @staticmethod
    def is_attribute(e: Expr) -> bool:
        """cel-go plans ``e`` as an attribute (qualifiers add to it) rather than a computed value."""
        if isinstance(e, Ident | Select):
            return True
        return isinstance(e, Call) and e.function in ("_[_]", "_[?_]", "_?._", "_?_:_")

    def cost_call(self, e: Call) -> Est:
        if e.function == "dyn" and len(e.args) == 1 and e.target is None:
            arg = e.args[0]
            c = self.cost(arg)
            self.copy_sizes(e, arg)
            return e_add(fixed(1), c)
        args = e.args
        arg_costs: list[Est] = []
        arg_nodes: list[Node] = []
        for a in args:
            arg_costs.append(self.cost(a))
            arg_nodes.append(self.node(a))
        overloads = self.checked.refs.get(e.id, [])
        if not overloads:
            return 0, 0
        total: Est = (0, 0)
        target: Node | None = None
        if e.target is not None:
            total = e_add(total, self.cost(e.target))
            target = self.node(e.target)
        fn_cost: Est = (U64, 0)
        result: Est | None = None
        for ov in (o.split("@", 1)[0] if "@cel-go" in o else o for o in overloads):
            c, size = self.function_cost(e, ov, target, arg_nodes, arg_costs)
            fn_cost = e_union(fn_cost, c)
            if size is not None:
                result = size if result is None else e_union(result, size)
            if ov in ("index_list", "index_map") and args:
                entry = self.entry(args[0])
                result = None if entry is None else entry.val
                self.paths[e.id] = [*self.get_path(args[0]), "@items" if ov == "index_list" else "@values"]
            if result is None:
                result = self.size(e)
        self.set_size(e, result)
        if self.env.bound and e.function in ("_[_]", "_[?_]") and args and not self.is_attribute(args[0]):
            total = e_add(total, fixed(1))
        return e_add(total, fn_cost)

    def cost_list(self, e: CreateList) -> Est:
        total: Est = (0, 0)
        item: Est = (0 if not e.elements else U64, 0)
        for x in e.elements:
            total = e_add(total, self.cost(x))
            item = e_union(item, self.size_or_unknown(x))
        self.set_entry(e, Entry(types.LIST_KIND, fixed(1), item))
        return e_add(total, fixed(LIST_CREATE_BASE_COST))

    def cost_map(self, e: CreateMap) -> Est:
        total: Est = (0, 0)
        empty = not e.entries
        key: Est = (0 if empty else U64, 0)
        val: Est = (0 if empty else U64, 0)
        for en in e.entries:
            total = e_add(total, self.cost(en.key))
            total = e_add(total, self.cost(en.value))
            key = e_union(key, self.size_or_unknown(en.key))
            val = e_union(val, self.size_or_unknown(en.value))
        self.set_entry(e, Entry(types.MAP_KIND, key, val))
        return e_add(total, fixed(MAP_CREATE_BASE_COST))

    def _push_iter(self, name: str, rng: Expr, role: str) -> None:
        """``pushIterKey`` / ``pushIterValue`` / ``pushIterSingle``."""
        entry = self.entry(rng)
        kind = entry.kind if entry is not None else self.type_of(rng).kind
        is_list = kind == types.LIST_KIND
        if role == "key":
            size, sub = (entry.key if entry else None), ("@indices" if is_list else "@keys")
        elif role == "value":
            size, sub = (entry.val if entry else None), ("@items" if is_list else "@values")
        elif is_list:
            size, sub = (entry.val if entry else None), "@items"
        else:
            size, sub = (entry.key if entry else None), "@keys"
        self.push(name, [*self.get_path(rng), sub], size, None)

    def _push_local(self, name: str, e: Expr) -> None:
        self.push(name, self.get_path(e), self.size(e), self.entry(e))

    def cost_comprehension(self, e: Comprehension) -> Est:
        total = e_add(self.cost(e.iter_range), self.cost(e.accu_init))
        self._push_local(e.accu_var, e.accu_init)
        if e.iter_var2:
            self._push_iter(e.iter_var, e.iter_range, "key")
            self._push_iter(e.iter_var2, e.iter_range, "value")
        else:
            self._push_iter(e.iter_var, e.iter_range, "single")
        loop = self.cost(e.loop_condition)
        step = self.cost(e.loop_step)
        self.pop(e.iter_var)
        if e.iter_var2:
            self.pop(e.iter_var2)
        total = e_add(total, self.cost(e.result))
        self.pop(e.accu_var)
        count = self.size_or_unknown(e.iter_range)
        total = e_add(total, e_mul(count, e_add(step, loop)))
        init = e.accu_init
        if isinstance(init, Literal):
            self.set_size(e, self.size(init))
        elif isinstance(init, CreateList | CreateMap):
            self.set_size(e, count)
            self.set_entry(e, self.entry(e.loop_step))
        return total

    @staticmethod
    def is_bind(e: Comprehension) -> bool:
        rng, cond = e.iter_range, e.loop_condition
        return (
            isinstance(rng, CreateList)
            and not rng.elements
            and isinstance(cond, Literal)
            and cond.value is False
            and e.accu_var != "@result"
        )

    def cost_bind(self, e: Comprehension) -> Est:
        total = e_add(self.cost(e.iter_range), self.cost(e.accu_init))
        self._push_local(e.accu_var, e.accu_init)
        total = e_add(total, self.cost(e.result))
        self.pop(e.accu_var)
        self.copy_sizes(e, e.result)
        return total

    # -- function costs -----------------------------------------------------------------------------
    def function_cost(  # noqa: PLR0911, PLR0912 - one branch per overload, as cel-go's functionCost
        self, e: Call, overload: str, target: Node | None, args: list[Node], arg_costs: list[Est]
    ) -> tuple[Est, Est | None]:
        arg_sum: Est = (0, 0)
        for c in arg_costs:
            arg_sum = e_add(arg_sum, c)
        ext = extension_cost(self.size_estimate, overload, target, args)
        if ext is not None:
            return e_add(ext[0], arg_sum), ext[1]
        k8s = kubernetes_cost(self.size_estimate, self.env.includes, e.function, overload, target=target, args=args)
        if k8s is not None:
            return e_add(k8s[0], arg_sum), k8s[1]
        if overload == "string_format" and target is not None:
            return e_add(e_factor(self.sized(target), STRING_TRAVERSAL_COST_FACTOR), arg_sum), None
        if overload in ("string_to_bytes", "bytes_to_string", "strings_quote") and len(args) == 1:
            sz = self.sized(args[0])
            if overload == "string_to_bytes":
                result = (sz[0], (sz[1] * 4) & U64)
            elif overload == "bytes_to_string":
                result = (sz[0] // 4, sz[1])
            else:
                result = ((sz[0] + 2) & U64, (sz[1] * 2 + 2) & U64)
            return e_add(e_factor(sz, STRING_TRAVERSAL_COST_FACTOR), arg_sum), result
        if overload in ("starts_with_string", "ends_with_string") and len(args) == 1:
            return e_add(e_factor(self.sized(args[0]), STRING_TRAVERSAL_COST_FACTOR), arg_sum), None
        if overload == "in_list" and len(args) == 2:
            return e_add(e_factor(self.sized(args[1]), 1), arg_sum), None
        if overload in ("matches", "matches_string"):
            pair: tuple[Node, Node] | None = None
            if overload == "matches_string" and target is not None and len(args) == 1:
                pair = (target, args[0])
            elif overload == "matches" and self.env.cel_go >= 29 and target is None and len(args) == 2:
                pair = (args[0], args[1])
            if pair is not None:
                s = e_factor(e_add(self.sized(pair[0]), (1, 1)), STRING_TRAVERSAL_COST_FACTOR)
                r = e_factor(self.sized(pair[1]), REGEX_STRING_LENGTH_COST_FACTOR)
                return e_add(e_mul(s, r), arg_sum), None
        if overload == "contains_string" and target is not None and len(args) == 1:
            s = e_factor(self.sized(target), STRING_TRAVERSAL_COST_FACTOR)
            sub = e_factor(self.sized(args[0]), STRING_TRAVERSAL_COST_FACTOR)
            return e_add(e_mul(s, sub), arg_sum), None
        if overload in ("logical_or", "logical_and"):
            lhs, rhs = arg_costs[0], arg_costs[1]
            return (lhs[0], add_u64(lhs[1], rhs[1])), None
        if overload == "conditional":
            size = e_union(self.sized(args[1]), self.sized(args[2]))
            t, f = self.entry_of(args[1]), self.entry_of(args[2])
            if t is not None and f is not None:
                self.set_entry(e, Entry(t.kind, e_union(t.key, f.key), e_union(t.val, f.val)))
            return e_add(arg_costs[0], e_union(arg_costs[1], arg_costs[2])), size
        if overload in ("add_string", "add_bytes", "add_list") and len(args) == 2:
            result = e_add(self.sized(args[0]), self.sized(args[1]))
            a, b = self.entry_of(args[0]), self.entry_of(args[1])
            if a is not None and b is not None:
                self.set_entry(e, Entry(a.kind, e_union(a.key, b.key), e_union(a.val, b.val)))
            if overload == "add_list":
                return e_add(fixed(1), arg_sum), result
            return e_add(e_factor(result, STRING_TRAVERSAL_COST_FACTOR), arg_sum), result
        if overload in _STRING_COMPARISONS:
            lhs_s, rhs_s = self.sized(args[0]), self.sized(args[1])
            smallest = min(lhs_s[1], rhs_s[1])
            return e_add(e_factor((1 if smallest > 0 else 0, smallest), STRING_TRAVERSAL_COST_FACTOR), arg_sum), None
        return e_add(fixed(1), arg_sum), None

    def entry_of(self, n: Node) -> Entry | None:
        return None if n.expr is None else self.entry(n.expr)

    @staticmethod
    def sized(n: Node) -> Est:
        """``sizeOrUnknown`` of an AstNode: its computed size."""
        return UNKNOWN if n.computed is None else n.computed


def estimate(root: Expr, checked: Checked, env: Environment) -> Est:
    """The (min, max) cost estimate of a checked expression."""
    return Coster(checked, env).cost(root)


__all__ = ["U64", "Environment", "estimate"]
