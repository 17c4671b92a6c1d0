"""Design matrices from formulas whose structure is public: glm()'s bridge to formulaic.

With a finite ``mu`` everything that shapes the model (the design columns, the categorical levels,
the number of multinomial classes, the transforms' parameters) must be public: a function of the
formula and the declarations, never of the private rows. One row with a rare level would otherwise
add a coefficient (a perfect distinguisher), and ``scale(x)`` would standardise with the raw mean.
:func:`build_design` therefore, when ``private``:

* takes categorical levels only from declarations (a pandas Categorical's categories, or
  ``levels={"col": [...]}``) and refuses undeclared ones;
* refuses stateful transforms (formulaic's ``scale``, ``center``, ``standardize``, ``poly``,
  ``bs``, ``cr``, ...), detected from the model spec's transform state: every stateful transform
  that learned anything from the data stored it there;
* accepts only terms that are row by row by construction (:func:`_check_row_by_row`): each
  factor is a column, a constant, or a Python expression built from columns and constants with
  elementwise operations only -- arithmetic and comparison operators, numpy ufuncs (``np.log``,
  ``np.exp``, ``np.abs``, ``np.maximum``, ...: elementwise by definition), ``abs`` and
  formulaic's ``I``, ``Q`` and ``C``. Such an expression maps each row's own values to its design
  row whatever the data, so replacing one row changes only that row of the design. Anything else
  (``np.mean``, ``np.quantile``, ``np.clip``, ``np.cumsum``, ``x.rank()``, ``lag(x)``, a
  subscript, a user function) is refused, whatever the data it is given: a check that evaluates
  the formula on some rows cannot exclude a term that reads other rows only on some datasets
  (ties, quantiles, extreme values).

With ``mu = inf`` levels may come from the data and every transform is allowed, as in statsmodels.
"""

from __future__ import annotations

import ast
import re
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # pandas is imported where it is used: it is slow to import
    import pandas as pd

__all__ = ["Design", "apply_design", "build_design"]

_DECLARE_HINT = (
    "pass levels={{{col!r}: [...]}} to glm() or make the column a pandas Categorical with all its categories "
    "(pd.Categorical(values, categories=[...])); with mu=float('inf') levels may be taken from the data"
)


@dataclass(frozen=True)
class Design:
    """A model's design from a formula.

    Attributes
    ----------
    X : ndarray of shape (n_samples, n_features)
    y : ndarray of shape (n_samples,)
        Responses (class codes 0..K-1 for a multinomial fit).
    clients : ndarray of shape (n_samples,)
        Client label of each kept row.
    rows : ndarray of shape (n_samples,)
        Positions of the kept rows in the data (all rows unless ``na_action="drop"`` dropped some).
    names : list of str
        Design column names.
    response : str
        Left-hand side of the formula.
    levels : dict
        Levels of every categorical term (key: the column, or the term for a categorical expression,
        possible only with ``mu = inf``) and the multinomial classes (key: the response), in order
        (the first is the reference).
    n_classes : int or None
        K for a multinomial fit.
    spec : formulaic.ModelSpecs
        The materialised formula (terms, levels, transform state), to build new rows the same way
        (:func:`apply_design`).
    """

    X: np.ndarray
    y: np.ndarray
    clients: np.ndarray
    rows: np.ndarray
    names: list[str]
    response: str
    levels: dict[str, list]
    n_classes: int | None
    spec: object


def build_design(
    formula: str,
    data: pd.DataFrame,
    *,
    client: str,
    multinomial: bool,
    levels: Mapping | None,
    na_action: str,
    private: bool,
    binary: bool = False,
) -> Design:
    """Materialise ``formula`` on ``data``; with ``private`` its structure may not depend on the rows.

    Parameters
    ----------
    formula, data, client, levels, na_action
        As in :func:`privfedstat.glm`.
    multinomial : bool
        Encode the response as class codes 0..K-1 (K from its declared levels).
    private : bool
        True for a finite ``mu``: levels must be declared and transforms must be stateless and row
        by row (see the module docstring).
    binary : bool
        A logistic fit: a response that is not numeric (strings, a pandas Categorical) is read as R reads
        a two-level factor, its first level failure (code 0) and its second success (code 1).

    Returns
    -------
    Design
    """
    import pandas as pd
    from formulaic import model_matrix  # here, not at module level: formulaic is slow to import
    from formulaic.errors import DataMismatchWarning

    work = data.reset_index(drop=True)  # positions as index: kept rows are positions
    declared = {c: list(work[c].cat.categories) for c in work.columns if isinstance(work[c].dtype, pd.CategoricalDtype)}
    for col, cats in _check_levels(levels, work).items():
        work[col] = _as_declared(work[col], cats, col)
        declared[col] = cats

    response = formula.split("~", 1)[0].strip()
    classes = None
    labelled = binary and response in work.columns and _is_labelled(work[response])
    if multinomial or labelled:
        if response not in work.columns:
            raise ValueError(f"response column {response!r} is not in the data.")
        classes = _classes(work[response], declared.get(response), response, private)
        if labelled and len(classes) != 2:
            raise ValueError(f"a logistic fit needs a response with two levels (the first is failure, as in R); "
                             f"{response!r} has {len(classes)}. Use family='multinomial' for more.")
        codes = pd.Categorical(work[response], categories=classes).codes
        work[response] = np.where(codes >= 0, codes, np.nan)

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", DataMismatchWarning)
            mm = model_matrix(formula, work, na_action=na_action, context={})
    except DataMismatchWarning:
        raise ValueError(
            f"a C(..., levels=[...]) term of {formula!r} has rows with values outside the levels it lists; "
            "declare every level with glm(levels={...}) instead (it counts such rows per column)."
        ) from None
    except Exception as exc:  # formulaic raises several error types; report them uniformly
        raise _formula_error(exc, formula, work) from None
    y_frame, X_frame = mm.lhs, mm.rhs
    if private:
        _check_no_stateful_transforms(mm)
        _check_declared(mm, declared, work.columns)
        _check_row_by_row(mm, work.columns)
    if y_frame.shape[1] != 1:
        raise ValueError(
            f"the formula must have one numeric response column; {response!r} gives {y_frame.shape[1]}. "
            "For a categorical response use family='multinomial' (or recode it as numbers)."
        )
    _check_finite(X_frame, y_frame)
    found = _term_levels(mm.rhs.model_spec, work.columns)
    if classes is not None:
        if not private:
            _check_no_empty_class(np.asarray(y_frame).ravel(), classes, response)
        found[response] = classes
    return Design(
        X=np.asarray(X_frame, dtype=np.float64),
        y=np.asarray(y_frame, dtype=np.float64).ravel(),
        clients=data[client].to_numpy()[X_frame.index.to_numpy()],
        rows=X_frame.index.to_numpy(),
        names=list(X_frame.columns),
        response=response,
        levels=found,
        n_classes=None if classes is None else len(classes),
        spec=mm.model_spec,
    )


def apply_design(
    spec,
    data: pd.DataFrame,
    *,
    levels: Mapping[str, list],
    response: str,
    classes: list | None,
    with_y: bool,
) -> tuple[np.ndarray, np.ndarray | None]:
    """New rows through a fitted formula: the fit's design columns, levels and transform state.

    Parameters
    ----------
    spec : formulaic.ModelSpecs
        :attr:`Design.spec` of the fit.
    data : pandas.DataFrame
        New rows (held-out data); the client column is not needed.
    levels : dict
        :attr:`Design.levels` of the fit: a value outside a column's levels raises (the message
        gives the column and the number of such rows, never the values).
    response : str
        The formula's response.
    classes : list or None
        The multinomial classes (the response is encoded as codes 0..K-1), else None.
    with_y : bool
        Also build the response (for scoring); else only the design matrix.

    Returns
    -------
    X : ndarray of shape (n_samples, n_features)
    y : ndarray of shape (n_samples,) or None
        None unless ``with_y``.
    """
    import pandas as pd
    if not isinstance(data, pd.DataFrame):
        raise TypeError(f"data must be a pandas DataFrame, got {type(data).__name__}.")
    from formulaic.errors import DataMismatchWarning  # here, not at module level: formulaic is slow to import

    work = data.reset_index(drop=True)
    if with_y and response not in work.columns:
        raise ValueError(f"the response column {response!r} is not in the data; it is needed to score.")
    for col, cats in levels.items():
        if col in work.columns and (with_y or col != response):
            work[col] = _as_declared(work[col], cats, col, fitted=True)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", DataMismatchWarning)
            X = spec.rhs.get_model_matrix(work, na_action="raise")
            y = None
            if with_y and classes is None:
                y = np.asarray(spec.lhs.get_model_matrix(work, na_action="raise"), dtype=np.float64).ravel()
    except DataMismatchWarning:
        raise ValueError("a categorical term has rows with values outside the fitted model's levels; "
                         "recode or remove those rows.") from None
    except Exception as exc:  # formulaic raises several error types; report them uniformly
        raise _formula_error(exc, str(spec.rhs.formula), work) from None
    if with_y and classes is not None:
        codes = pd.Categorical(work[response], categories=classes).codes
        if np.any(codes < 0):
            raise ValueError(f"column {response!r}: {int(np.sum(codes < 0))} row(s) have a missing response.")
        y = codes.astype(np.float64)
    return np.asarray(X, dtype=np.float64), y


# ---------------------------------------------------------------------- declarations
def _check_levels(levels, data: pd.DataFrame) -> dict[str, list]:
    """Validate glm()'s ``levels`` argument: {column: distinct, non-missing levels}."""
    import pandas as pd
    if levels is None:
        return {}
    if not isinstance(levels, Mapping):
        raise TypeError(f"levels must be a dict {{column: [level, ...]}}, got {type(levels).__name__}.")
    out = {}
    for col, cats in levels.items():
        if col not in data.columns:
            raise ValueError(f"levels names column {col!r}, which is not in the data; columns are {list(data.columns)}.")
        if isinstance(cats, (str, bytes)) or not hasattr(cats, "__iter__"):
            raise TypeError(f"levels[{col!r}] must be a list of levels, got {type(cats).__name__}.")
        cats = list(cats)
        if not cats:
            raise ValueError(f"levels[{col!r}] is empty; list every level the column can take.")
        if pd.isna(pd.Series(cats, dtype=object)).any():
            raise ValueError(f"levels[{col!r}] contains a missing value; missing values are not a level.")
        if pd.Series(cats, dtype=object).duplicated().any():
            raise ValueError(f"levels[{col!r}] lists a level twice; levels must be distinct.")
        out[col] = cats
    return out


def _as_declared(values: pd.Series, cats: list, col: str, fitted: bool = False) -> pd.Series:
    """``values`` as a Categorical with the declared categories (or, ``fitted``, a fitted model's
    levels); rows outside them raise (counted)."""
    import pandas as pd
    outside = int((values.notna() & ~values.isin(cats)).sum())
    if outside:
        what, fix = (("the fitted model's levels", "the model has no coefficients for them") if fitted else
                     ("the declared levels", "or add the missing levels to the declaration"))
        raise ValueError(
            f"column {col!r}: {outside} row(s) have a value outside {what} ({', '.join(map(repr, cats[:8]))}"
            f"{' ...' if len(cats) > 8 else ''}); "
            f"recode or remove those rows ({fix}).{_type_mismatch(values, cats)}"
        )
    return pd.Series(pd.Categorical(values, categories=cats), index=values.index)


def _type_mismatch(values: pd.Series, cats: list) -> str:
    """A hint when the levels and the column differ in kind (``["0", "1"]`` declared for a float column: no row
    matches, and the count alone would not say why); types only, never values."""
    import pandas as pd
    numeric = pd.api.types.is_numeric_dtype(values) and not pd.api.types.is_bool_dtype(values)
    declared = {type(c).__name__ for c in cats}
    if numeric == all(isinstance(c, (int, float, np.number)) and not isinstance(c, bool) for c in cats):
        return ""
    return (f" The declared levels are {', '.join(sorted(declared))} and the column holds {values.dtype}: declare "
            "the levels as the column holds them.")


def _is_labelled(values: pd.Series) -> bool:
    """Whether a response column holds labels (strings, a Categorical) rather than numbers."""
    import pandas as pd
    return isinstance(values.dtype, pd.CategoricalDtype) or not pd.api.types.is_numeric_dtype(values)


def _classes(values: pd.Series, declared: list | None, response: str, private: bool) -> list:
    """The classes of a categorical response: declared, or (only with ``mu = inf``) the observed values, sorted."""
    if declared is not None:
        return declared
    if private:
        raise ValueError(
            f"a categorical response needs its levels declared, not read from the data (a row with a rare "
            f"class would add one): {_DECLARE_HINT.format(col=response)}."
        )
    return list(values.astype("category").cat.categories)


def _check_no_empty_class(codes: np.ndarray, classes: list, response: str) -> None:
    """With ``mu = inf`` (exact counts, which the analyst sees anyway) a declared class with no rows is refused: its
    coefficients have no finite MLE (the fit drifts to an intercept of -20 or so with nothing saying why). With finite
    mu the counts are private and the fit's diagnostics speak for it."""
    empty = [c for k, c in enumerate(classes) if not np.any(codes == k)]
    if empty:
        raise ValueError(
            f"the response {response!r} has no rows of the declared level(s) {', '.join(map(repr, empty))}: a class "
            "with no rows has no finite coefficients (its probability's MLE is 0). Drop it from "
            f"levels[{response!r}] (or from the Categorical's categories).")


# ---------------------------------------------------------------------- checks for finite mu
def _check_no_stateful_transforms(mm) -> None:
    """Refuse transforms whose parameters (means, scales, knots, bases) were computed from the data."""
    fitted = list(dict.fromkeys(name for spec in (mm.lhs.model_spec, mm.rhs.model_spec)  # both sides list them
                                for name, state in spec.transform_state.items() if state))
    if fitted:
        raise ValueError(
            f"the formula's stateful transform(s) {fitted} compute their parameters (means, scales, knots, bases) "
            "from the private data, which no privacy accounting covers. With finite mu rescale with glm's "
            "scaling= (private standardisation recorded in the ledger, or public FeatureBounds) and build other "
            "transforms beforehand from public constants; or fit with mu=float('inf')."
        )


def _check_declared(mm, declared: dict[str, list], columns: pd.Index) -> None:
    """Every categorical term must be a declared column (or C(column)) using exactly its declared levels."""
    for spec in (mm.lhs.model_spec, mm.rhs.model_spec):
        for expr, (kind, state) in spec.encoder_state.items():
            if getattr(kind, "value", kind) != "categorical":
                continue
            col = _factor_column(expr, columns)
            if col is None:
                raise ValueError(
                    f"the categorical term {expr!r} is computed from the data, so its levels are not declared. "
                    "With finite mu make it a column of the data first (a pandas Categorical with all its "
                    "categories, or a column named in glm(levels=...)) and use the column in the formula."
                )
            if col not in declared:
                inline = (" Levels written inside the formula (C(..., levels=[...])) are not a declaration: declare "
                          "them once, in glm(levels=...) or a pandas Categorical." if "levels" in expr else "")
                raise ValueError(
                    f"column {col!r} is categorical, and with finite mu its levels must be declared, not read "
                    f"from the data (a row with a rare level would add a coefficient): {_DECLARE_HINT.format(col=col)}."
                    + inline
                )
            if list(state["categories"]) != list(declared[col]):
                raise ValueError(
                    f"the term {expr!r} does not use the declared levels of column {col!r}; drop levels= from "
                    "C(...) and declare the levels once (glm(levels=...) or a pandas Categorical)."
                )


def _check_row_by_row(mm, columns: pd.Index) -> None:
    """Refuse terms that are not row by row by construction (see the module docstring); no data is evaluated."""
    suspect = [str(term) for spec in (mm.lhs.model_spec, mm.rhs.model_spec) for term in spec.terms
               if not all(_elementwise(factor, columns) for factor in term.factors)]
    if suspect:
        raise ValueError(
            f"the formula column(s) {suspect} may use values of other rows (e.g. lag(x), x - np.mean(x), "
            "np.quantile, np.clip, x.rank(), cumsum): with finite mu every row's design must depend on that row "
            "alone, or one person's data would change other rows and the clipping bound would not hold. Terms "
            "may use columns, constants, arithmetic and comparisons, numpy ufuncs (np.log, np.exp, np.abs, "
            "np.maximum, ...), abs, I(), Q() and C(). Compute other columns beforehand from public constants, or "
            "use glm's scaling= to rescale."
        )


#: formulaic's wrappers and Python builtins that act on each row alone
_ROWWISE_CALLS = {"I", "Q", "C", "abs"}
#: operators that act elementwise on columns (``@``, ``in``, ``is``, ``and``, ``or`` do not)
_ROWWISE_OPS = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow, ast.BitAnd, ast.BitOr,
                ast.BitXor, ast.LShift, ast.RShift, ast.UAdd, ast.USub, ast.Invert, ast.Eq, ast.NotEq, ast.Lt,
                ast.LtE, ast.Gt, ast.GtE)


def _elementwise(factor, columns: pd.Index) -> bool:
    """Whether a formulaic factor is a column, a literal, or an expression of elementwise operations only."""
    method = getattr(factor.eval_method, "value", factor.eval_method)
    if method in ("literal", "lookup"):
        return True
    parsed = _parse(factor.expr)
    if parsed is None:
        return False
    node, quoted = parsed
    names = set(columns)

    def ok(n: ast.AST) -> bool:
        if isinstance(n, ast.Constant):
            return True
        if isinstance(n, ast.Name):
            return quoted.get(n.id, n.id) in names
        if isinstance(n, (ast.List, ast.Tuple)):
            return all(isinstance(e, ast.Constant) for e in n.elts)
        if isinstance(n, ast.BinOp):
            return isinstance(n.op, _ROWWISE_OPS) and ok(n.left) and ok(n.right)
        if isinstance(n, ast.UnaryOp):
            return isinstance(n.op, _ROWWISE_OPS) and ok(n.operand)
        if isinstance(n, ast.Compare):
            return all(isinstance(op, _ROWWISE_OPS) for op in n.ops) and ok(n.left) and all(map(ok, n.comparators))
        if isinstance(n, ast.Call):
            f = n.func
            if isinstance(f, ast.Name) and f.id in _ROWWISE_CALLS:
                keywords_ok = f.id == "C" and all(isinstance(k.value, (ast.Constant, ast.List, ast.Tuple))
                                                  and ok(k.value) for k in n.keywords)
                return (keywords_ok or not n.keywords) and all(map(ok, n.args))
            ufunc = (isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id in ("np", "numpy")
                     and isinstance(getattr(np, f.attr, None), np.ufunc))
            return ufunc and not n.keywords and all(map(ok, n.args))
        return False

    return ok(node)


def _parse(expr: str) -> tuple[ast.AST, dict[str, str]] | None:
    """``expr`` as a Python expression (backquoted column names replaced by aliases) and the aliases; None if it
    does not parse."""
    quoted: dict[str, str] = {}

    def alias(match: re.Match) -> str:
        quoted[f"_q{len(quoted)}_"] = match.group(1)
        return f"_q{len(quoted) - 1}_"

    try:
        return ast.parse(re.sub(r"`([^`]*)`", alias, expr), mode="eval").body, quoted
    except SyntaxError:
        return None


# ---------------------------------------------------------------------- helpers
def _factor_column(expr: str, columns: pd.Index) -> str | None:
    """The data column a categorical factor encodes (``col`` or ``C(col, ...)``), else None."""
    if expr in columns:
        return expr
    parsed = _parse(expr)
    if parsed is None:
        return None
    node, quoted = parsed
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "C"
            and node.args and isinstance(node.args[0], ast.Name)):
        name = quoted.get(node.args[0].id, node.args[0].id)
        return name if name in columns else None
    return None


def _term_levels(spec, columns: pd.Index) -> dict[str, list]:
    """Levels of each categorical term, keyed by its column (or by the term if it is an expression)."""
    out = {}
    for expr, (kind, state) in spec.encoder_state.items():
        if getattr(kind, "value", kind) == "categorical":
            out[_factor_column(expr, columns) or expr] = list(state["categories"])
    return out


def _formula_error(exc: Exception, formula: str, data: pd.DataFrame) -> ValueError:
    """A formulaic error as a ValueError that names the term but never echoes data values."""
    text = str(exc).strip()
    first = text.splitlines()[0] if text else type(exc).__name__
    if " [" in first:  # formulaic appends the inner error in brackets; it may quote a data value
        inner = re.search(r"\[(\w+)", first[first.index(" ["):])
        first = first[: first.index(" [")] + (f" ({inner.group(1)})" if inner else "")
    if "null values" in first:
        return ValueError(f"{first} The data has missing values in the model's columns; remove or impute them "
                          "(or pass na_action='drop', which releases the client sizes after dropping).")
    hint = ""
    if re.search(r"\b(offset|exposure)\s*\(", formula):  # R's offset() term: glm() takes it as an argument
        hint = (" An offset is an argument, not a term: glm(..., offset='column') (or exposure='column' for a "
                "Poisson rate), as in statsmodels.")
    return ValueError(f"could not build the model from {formula!r}: {first}. Available columns: "
                      f"{list(data.columns)}.{hint}")


def _check_finite(X_frame, y_frame) -> None:
    """Refuse infinite values in the design or the response, naming the design columns (missing values were handled
    by ``na_action``): the message gives the columns and the number of such rows, never the values."""
    for frame, what in ((y_frame, "the response"), (X_frame, "the design")):
        values = np.asarray(frame, dtype=np.float64)
        bad = ~np.isfinite(values)
        if bad.any():
            columns = [str(c) for c, b in zip(frame.columns, bad.any(axis=0)) if b]
            raise ValueError(f"{what} has {int(bad.any(axis=1).sum())} row(s) with infinite values in column(s) "
                             f"{columns[:10]} (e.g. log(0) or a division by 0); remove, cap or recode them before "
                             "fitting.")
