"""CEL's macros expanded into comprehensions as cel-go's parser expands them.

The macros are ``has``, ``all``, ``exists``, ``exists_one``, ``map``, ``filter``, ``cel.bind``
and the two-variable forms (``all(k, v, ...)``, ``transformList``, ``transformMap``, ...).

Called by the parser (``syntax.py``), whose tree builder derives from :class:`MacroExpander`: a
call that is a macro becomes the same comprehension cel-go builds (the same accumulator name,
loop condition and step), so the checker and the planner see cel-go's tree. Macro misuse is a
parse issue, as in cel-go.
"""

from __future__ import annotations

from dra_driver.schedsim.cel.nodes import Call, Comprehension, CreateList, CreateMap, Expr, Ident, Issue, Literal, Select

ACCU = "@result"
UNUSED_ITER = "#unused"


class MacroExpander:
    """Node ids, parse issues, and macro expansion; the tree builder of ``syntax.py`` extends it."""

    def __init__(self) -> None:
        self.next_id = 1
        self.issues: list[Issue] = []

    def _nid(self) -> int:
        i = self.next_id
        self.next_id += 1
        return i

    def _error(self, offset: int, message: str) -> Expr:
        self.issues.append(Issue(offset, message))
        return Literal(self._nid(), offset, None)

    # -- calls and macros ------------------------------------------------------------------------
    def _call(self, at: int, name: str, target: Expr | None, args: list[Expr]) -> Expr:
        expanded = self._macro(at, name, target, args)
        if expanded is not None:
            return expanded
        return Call(self._nid(), at, name, target, args)

    def _macro(self, at: int, name: str, target: Expr | None, args: list[Expr]) -> Expr | None:  # noqa: PLR0911 - one branch per CEL macro
        n = len(args)
        if target is None:
            if name == "has" and n == 1:
                arg = args[0]
                if isinstance(arg, Select) and not arg.test_only:
                    return Select(self._nid(), at, arg.operand, arg.field, test_only=True)
                return self._error(arg.offset, "invalid argument to has() macro")
            return None
        if name in ("all", "exists", "exists_one") and n == 2:
            return self._quantifier(at, name, target, args)
        if name == "map" and n in (2, 3):
            return self._map_macro(at, target, args)
        if name == "filter" and n == 2:
            return self._filter_macro(at, target, args)
        if name == "bind" and n == 3 and isinstance(target, Ident) and target.name == "cel":
            var = args[0]
            if not isinstance(var, Ident):
                return self._error(var.offset, "cel.bind() variable names must be simple identifiers")
            return Comprehension(
                self._nid(),
                at,
                UNUSED_ITER,
                CreateList(self._nid(), at, []),
                var.name,
                args[1],
                Literal(self._nid(), at, False),
                Ident(self._nid(), at, var.name),
                args[2],
            )
        if name in ("all", "exists", "existsOne", "exists_one") and n == 3:
            return self._quantifier2(at, name, target, args)
        if name in ("transformList", "transformMap", "transformMapEntry") and n in (3, 4):
            return self._transform2(at, name, target, args)
        if name in ("optMap", "optFlatMap", "sortBy") and n == 2:
            return self._error(at, f"the {name}() macro is not supported by dra-gpu's CEL environment")
        return None

    def _iter_vars(self, a0: Expr, a1: Expr) -> tuple[str, str] | Expr:
        if not isinstance(a0, Ident):
            return self._error(a0.offset, "argument must be a simple name")
        if not isinstance(a1, Ident):
            return self._error(a1.offset, "argument must be a simple name")
        if a0.name == a1.name:
            return self._error(a1.offset, f"duplicate variable name: {a0.name}")
        if a0.name in (ACCU, "__result__"):
            return self._error(a0.offset, "iteration variable overwrites accumulator variable")
        if a1.name in (ACCU, "__result__"):
            return self._error(a1.offset, "iteration variable overwrites accumulator variable")
        return a0.name, a1.name

    def _quantifier2(self, at: int, name: str, target: Expr, args: list[Expr]) -> Expr:
        names = self._iter_vars(args[0], args[1])
        if isinstance(names, Expr):
            return names
        one = self._quantifier(
            at, {"existsOne": "exists_one"}.get(name, name), target, [Ident(self._nid(), at, names[0]), args[2]]
        )
        if isinstance(one, Comprehension):
            one.iter_var2 = names[1]
        return one

    def _transform2(self, at: int, name: str, target: Expr, args: list[Expr]) -> Expr:
        names = self._iter_vars(args[0], args[1])
        if isinstance(names, Expr):
            return names
        fn = args[-1]
        init: Expr
        step: Expr
        if name == "transformList":
            init = CreateList(self._nid(), at, [])
            step = Call(self._nid(), at, "_+_", None, [self._accu(at), CreateList(self._nid(), at, [fn])])
        else:
            init = CreateMap(self._nid(), at, [])
            insert_args = (
                [self._accu(at), Ident(self._nid(), at, names[0]), fn] if name == "transformMap" else [self._accu(at), fn]
            )
            step = Call(self._nid(), at, "cel.@mapInsert", None, insert_args)
        if len(args) == 4:
            step = Call(self._nid(), at, "_?_:_", None, [args[2], step, self._accu(at)])
        return Comprehension(
            self._nid(), at, names[0], target, ACCU, init, Literal(self._nid(), at, True), step, self._accu(at), names[1]
        )

    def _iter_var(self, arg: Expr, message: str) -> str | Expr:
        if not isinstance(arg, Ident):
            return self._error(arg.offset, message)
        if arg.name in (ACCU, "__result__"):
            return self._error(arg.offset, "iteration variable overwrites accumulator variable")
        return arg.name

    def _accu(self, at: int) -> Ident:
        return Ident(self._nid(), at, ACCU)

    def _quantifier(self, at: int, name: str, target: Expr, args: list[Expr]) -> Expr:
        var = self._iter_var(args[0], "argument must be a simple name")
        if isinstance(var, Expr):
            return var
        pred = args[1]
        init: Expr
        cond: Expr
        step: Expr
        result: Expr
        if name == "all":
            init = Literal(self._nid(), at, True)
            cond = Call(self._nid(), at, "@not_strictly_false", None, [self._accu(at)])
            step = Call(self._nid(), at, "_&&_", None, [self._accu(at), pred])
            result = self._accu(at)
        elif name == "exists":
            init = Literal(self._nid(), at, False)
            cond = Call(self._nid(), at, "@not_strictly_false", None, [Call(self._nid(), at, "!_", None, [self._accu(at)])])
            step = Call(self._nid(), at, "_||_", None, [self._accu(at), pred])
            result = self._accu(at)
        else:
            init = Literal(self._nid(), at, 0)
            cond = Literal(self._nid(), at, True)
            plus = Call(self._nid(), at, "_+_", None, [self._accu(at), Literal(self._nid(), at, 1)])
            step = Call(self._nid(), at, "_?_:_", None, [pred, plus, self._accu(at)])
            result = Call(self._nid(), at, "_==_", None, [self._accu(at), Literal(self._nid(), at, 1)])
        return Comprehension(self._nid(), at, var, target, ACCU, init, cond, step, result)

    def _map_macro(self, at: int, target: Expr, args: list[Expr]) -> Expr:
        var = self._iter_var(args[0], "argument is not an identifier")
        if isinstance(var, Expr):
            return var
        fn = args[-1]
        step: Expr = Call(self._nid(), at, "_+_", None, [self._accu(at), CreateList(self._nid(), at, [fn])])
        if len(args) == 3:
            step = Call(self._nid(), at, "_?_:_", None, [args[1], step, self._accu(at)])
        return Comprehension(
            self._nid(),
            at,
            var,
            target,
            ACCU,
            CreateList(self._nid(), at, []),
            Literal(self._nid(), at, True),
            step,
            self._accu(at),
        )

    def _filter_macro(self, at: int, target: Expr, args: list[Expr]) -> Expr:
        var = self._iter_var(args[0], "argument is not an identifier")
        if isinstance(var, Expr):
            return var
        item = Ident(self._nid(), args[0].offset, var)
        step: Expr = Call(self._nid(), at, "_+_", None, [self._accu(at), CreateList(self._nid(), at, [item])])
        step = Call(self._nid(), at, "_?_:_", None, [args[1], step, self._accu(at)])
        return Comprehension(
            self._nid(),
            at,
            var,
            target,
            ACCU,
            CreateList(self._nid(), at, []),
            Literal(self._nid(), at, True),
            step,
            self._accu(at),
        )
