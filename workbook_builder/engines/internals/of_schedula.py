"""The engine's calculation as a plain loop over its compiled functions (schedula's
dispatchers, read through their node records).

The engine evaluates a workbook with schedula, a general dispatcher that, for every cell,
walks a graph solution, tracks distances and records a workflow, and then does the same
again inside the cell's own compiled formula (itself a small dispatcher). On a workbook
without cycles, where every value has one source, all that comes down to calling each
function once its inputs are known. `OrderedCalculation` orders the engine's own
functions once per model (and once per compiled formula, which the cells of one formula
form share) and calls them in that order: the same functions, on the same arguments,
through the same filters, so the same values, without the bookkeeping. Anything the loop
does not reproduce exactly raises CalculationRefused and the caller uses the engine's own
calculation: a cycle, a value with two sources, a node option the loop does not know, a
function that raises or returns nothing, an input the model has no node for. Taken only
within the releases of formulas and schedula `versions.SUPPORTED` names (the caller asks
`of_formulas.formula_shortcuts`); tests/test_fast_calc.py shows both calculations give
identical values.
"""

from types import SimpleNamespace
from typing import Any

from workbook_builder.engines.internals import CalculationRefused
from workbook_builder.engines.internals.of_formulas import formulas_changes

# node options the loop reproduces (others, e.g. input domains, callbacks, waiting data
# nodes, are refused); `inv-data` and `solve_cycle` matter to the engine only for cycles,
# `extra_inputs` records inputs the node also lists among its `inputs`
_DATA_OPTIONS = frozenset({"type", "index", "wait_inputs", "filters", "inv-data",
                           "description"})
_FUNCTION_OPTIONS = frozenset({"type", "index", "wait_inputs", "function", "inputs",
                               "outputs", "filters", "solve_cycle", "extra_inputs"})


def _apply(filters, value):
    for apply in filters:
        value = apply(value)
    return value


class _Plan:
    """A dispatcher's function nodes in dependency order, for a given set of known nodes.

    steps: (function, input nodes, output nodes, function filters, each output's filters),
    only the functions whose inputs all become known, as schedula would run them."""

    def __init__(self, dsp, known: set, wrap_function):
        import schedula as sh

        nodes = dsp.nodes
        producers: dict[Any, Any] = {}
        functions, inverse = [], []
        for node_id, attr in nodes.items():
            if attr["type"] == "data":
                if not attr.keys() <= _DATA_OPTIONS or attr.get("wait_inputs"):
                    raise CalculationRefused(f"data node option of {node_id!r}")
            elif attr["type"] == "function" and attr.keys() <= _FUNCTION_OPTIONS and \
                    attr.get("wait_inputs", True) and attr.get("inputs") and \
                    attr.get("outputs") and \
                    set(attr.get("extra_inputs", ())) <= set(attr["inputs"]):
                (inverse if _is_inverse(attr, nodes) else functions).append(node_id)
            else:
                raise CalculationRefused(f"node {node_id!r}")
        for f in functions:
            for output in nodes[f]["outputs"]:
                if output in producers or output in known:
                    raise CalculationRefused(f"{output!r} has two sources")
                producers[output] = f
        # an inverse edge (a range's value back to the cells it was assembled from, a
        # defined name's to its range) reaches a node after the node's own source, which
        # therefore gives the value; it gives the value only to nodes with no other source
        kept_outputs = {}
        for f in inverse:
            kept = tuple(i for i, output in enumerate(nodes[f]["outputs"])
                         if output not in producers and output not in known)
            if kept:
                kept_outputs[f] = kept
                functions.append(f)
        for f, kept in kept_outputs.items():
            for i in kept:
                output = nodes[f]["outputs"][i]
                if output in producers:
                    raise CalculationRefused(f"{output!r} has two sources")
                producers[output] = f
        waiting = {f: set(nodes[f]["inputs"]) - known for f in functions}
        users: dict[Any, list] = {}
        for f, missing in waiting.items():
            for name in missing:
                users.setdefault(name, []).append(f)
        ready = [f for f, missing in waiting.items() if not missing]
        order = []
        while ready:
            f = ready.pop()
            order.append(f)
            outputs = nodes[f]["outputs"]
            for output in (outputs[i] for i in kept_outputs[f]) if f in kept_outputs \
                    else outputs:
                for user in users.get(output, ()):
                    waiting[user].discard(output)
                    if not waiting[user]:
                        ready.append(user)
        available = known | producers.keys()
        for f in set(functions) - set(order):
            if set(nodes[f]["inputs"]) <= available:  # blocked only by one another: a cycle
                raise CalculationRefused("circular references")
        self.steps = []
        for f in order:
            attr = nodes[f]
            if sh.SELF in attr["inputs"]:
                _check_reads_only_unknown(attr["function"], available)
            # the engine gives START (no value) to functions without inputs, and calls
            # every function without its inputs that have no value
            inputs = tuple(name for name in attr["inputs"] if name is not sh.START)
            self.steps.append((wrap_function(attr["function"]), inputs,
                               tuple(attr["outputs"]), tuple(attr.get("filters", ())),
                               tuple(tuple(nodes[o].get("filters", ())) for o in
                                     attr["outputs"]), kept_outputs.get(f)))

    def run(self, values: dict) -> dict:
        """`values` (the known nodes, filtered) completed by every step."""
        import schedula as sh

        none = sh.NONE
        for function, inputs, outputs, function_filters, output_filters, kept in self.steps:
            args = [values[name] for name in inputs]
            try:
                result = _apply(function_filters, function(*args))
            except CalculationRefused:
                raise
            except Exception as error:  # the engine would skip this node (or raise)
                raise CalculationRefused(f"{type(error).__name__} in a formula") from error
            results = (result,) if len(outputs) == 1 else tuple(result)
            if len(results) != len(outputs):
                raise CalculationRefused("outputs")
            for index, (name, value, filters) in enumerate(zip(outputs, results,
                                                                output_filters, strict=True)):
                if kept is not None and index not in kept:
                    continue
                if value is none:
                    raise CalculationRefused("a function gave no value")
                values[name] = _apply(filters, value)
        return values


def _is_inverse(attr: dict, nodes: dict) -> bool:
    """A function the engine adds to carry a value backwards (it marks them `inv-data`)."""
    inputs = list(attr["inputs"])
    return len(inputs) == 1 and \
        set(attr["outputs"]) <= set(nodes[inputs[0]].get("inv-data", ()))


def _check_reads_only_unknown(function, available: set) -> None:
    """The engine gives a range assembler the dispatcher itself (SELF) to read the range's
    cells that have no node; only then may the loop give it the values so far instead."""
    import schedula as sh
    from formulas.cell import RangesAssembler

    cells = function.inputs.get(sh.SELF) if isinstance(function, RangesAssembler) else None
    if not isinstance(cells, dict) or any(name in available for name in cells):
        raise CalculationRefused("a function reads the dispatcher")


class FormulaLoop:
    """One compiled formula (the engine's DispatchPipe) as a plain loop; the cells of one
    formula form share it."""

    def __init__(self, pipe):
        import schedula as sh

        dsp = pipe.dsp
        self.inputs = tuple(pipe.inputs or ())
        if len(pipe.outputs or ()) != 1 or pipe.output_type not in ("values", "list"):
            raise CalculationRefused("formula outputs")
        self.output = pipe.outputs[0]
        defaults = {k: v["value"] for k, v in dsp.default_values.items()}
        known = set(self.inputs) | set(defaults)
        self.plan = _Plan(dsp, known, _plain_function)
        self.list_output = pipe.output_type == "list"
        nodes = dsp.nodes
        self.input_filters = tuple(tuple(nodes[k].get("filters", ())) for k in self.inputs)
        # constants without filters are passed as they are, like the engine does
        self.constants = {k: v for k, v in defaults.items()
                          if k not in self.inputs and not nodes[k].get("filters")}
        self.filtered_constants = {k: (v, tuple(nodes[k]["filters"]))
                                   for k, v in defaults.items()
                                   if k not in self.inputs and nodes[k].get("filters")}
        if any(v is sh.NONE for v in defaults.values()):
            raise CalculationRefused("an empty constant")

    def __call__(self, *args):
        import schedula as sh

        if len(args) != len(self.inputs):
            raise CalculationRefused("formula arguments")
        values = dict(self.constants)
        for name, (value, filters) in self.filtered_constants.items():
            values[name] = _apply(filters, value)
        for name, value, filters in zip(self.inputs, args, self.input_filters, strict=True):
            if value is sh.NONE:
                raise CalculationRefused("an empty argument")
            values[name] = _apply(filters, value)
        values = self.plan.run(values)
        if self.output not in values:
            raise CalculationRefused("formula output not reached")
        return [values[self.output]] if self.list_output else values[self.output]


def _plain_function(function):
    """Inside a compiled formula: the function itself, unless it is a dispatcher."""
    import schedula as sh

    if isinstance(sh.parent_func(function), (sh.Dispatcher, sh.SubDispatch)):
        raise CalculationRefused("a dispatcher inside a formula")
    return function


class OrderedCalculation:
    """A model's calculation as a plain loop, planned once; `calculate` gives what
    `model.calculate(inputs=…)` gives (every node's value), or raises CalculationRefused."""

    @formulas_changes()
    def __init__(self, model):
        import schedula as sh
        from formulas.cell import CellWrapper

        dsp = model.dsp
        self._defaults = {k: v["value"] for k, v in dsp.default_values.items()}
        self._filters = {k: tuple(attr.get("filters", ()))
                         for k, attr in dsp.nodes.items() if attr["type"] == "data"}
        loops: dict[int, FormulaLoop] = {}  # one per compiled formula, shared by its cells

        def outer_function(function):
            if isinstance(function, CellWrapper) and isinstance(function.func,
                                                                 sh.DispatchPipe):
                pipe = function.func
                if id(pipe) not in loops:
                    loops[id(pipe)] = FormulaLoop(pipe)
                loop, parse_args, parse_kwargs = loops[id(pipe)], function.parse_args, \
                    function.parse_kwargs
                if parse_kwargs() != {}:
                    raise CalculationRefused("keyword arguments")
                return lambda *args: loop(*parse_args(*args))
            if isinstance(sh.parent_func(function), (sh.Dispatcher, sh.SubDispatch)):
                raise CalculationRefused("a dispatcher as a cell's function")
            return function

        self._plan = _Plan(dsp, set(self._defaults), outer_function)
        self.formulas = len(loops)

    @formulas_changes()
    def calculate(self, inputs: dict | None = None) -> dict:
        import schedula as sh

        values = dict(self._defaults)
        for name, value in (inputs or {}).items():
            if name not in self._defaults:
                raise CalculationRefused(f"no constant node {name!r}")
            values[name] = value
        # the engine's dispatcher gives itself as SELF; the range assemblers read the
        # current solution from it
        values[sh.SELF] = SimpleNamespace(solution=values)
        for name, value in values.items():
            if value is sh.NONE and name is not sh.START:
                raise CalculationRefused("an empty input")
            filters = self._filters.get(name)
            if filters:
                values[name] = _apply(filters, value)
        values = self._plan.run(values)
        values.pop(sh.SELF)
        values.pop(sh.START, None)  # not a value, as in the engine's solution
        return values
