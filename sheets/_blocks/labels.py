"""Label sets kinds share: positions counted from 1 or 0, and a source|target pair of
sequences."""

from workbook_builder.errors import UserError
from workbook_builder.sheet import Kind


def positions_from_1(p) -> list[int]:
    """1 … n: the labels a causal mask or a look-at position compares."""
    return list(range(1, p.seq_len + 1))


class TwoSequenceKind(Kind):
    """A kind over a source (src_len) and a target (tgt_len) sequence, labelled by
    --tokens "SOURCE|TARGET". Not registered itself: it has no name. `target` names the
    parameter holding the target's length (seq2seq: its decode steps)."""

    target = "tgt_len"

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        # the flags --tokens sets, by their names in this kind (seq2seq: --decode)
        cls.tokens_help = ('"SOURCE|TARGET" labels, each side comma-separated, e.g. '
                           f'"我,爱,AI|I,love,AI" (also sets --src-len and '
                           f'--{cls.target.replace("_", "-")})')

    @classmethod
    def params_from_tokens(cls, tokens):
        """--src-len/--tgt-len implied by "x1,x2|y1"; a malformed list is reported by
        `labels`."""
        sides = ",".join(tokens).split("|")
        if len(sides) != 2:
            return {}
        return {"src_len": len(sides[0].split(",")), cls.target: len(sides[1].split(","))}

    @classmethod
    def labels(cls, p, tokens):
        """Source labels then target labels. The CLI splits --tokens on commas, so the two
        sequences are told apart by one "|": "x1,x2,x3|y1,y2"."""
        if tokens is None:
            return [f"x{i + 1}" for i in range(p.src_len)] + \
                [f"y{i + 1}" for i in range(getattr(p, cls.target))]
        joined = ",".join(tokens)
        if joined.count("|") != 1:
            raise UserError(f'--tokens for {cls.name} is "SOURCE|TARGET", each side '
                            f'comma-separated, e.g. "我,爱,AI|I,love,AI"')
        src, tgt = ([t.strip() for t in side.split(",")] for side in joined.split("|"))
        if not all(src) or not all(tgt):
            raise UserError("--tokens has an empty label")
        target = getattr(p, cls.target)
        if len(src) != p.src_len or len(tgt) != target:
            raise UserError(f"--tokens gives {len(src)} source and {len(tgt)} target labels "
                            f"but --src-len is {p.src_len} and "
                            f"--{cls.target.replace('_', '-')} is {target}")
        return src + tgt

    @classmethod
    def label_sets(cls, p, labels):
        return {"tokens": labels, "src": labels[:p.src_len], "tgt": labels[p.src_len:]}


def position_label_sets(cls, p, labels):
    """Label sets of a kind whose formulas read 0-based positions from their labels:
    "positions" = 0 … n−1 besides "tokens". In the kind: label_sets =
    classmethod(position_label_sets)."""
    return {"tokens": labels, "positions": list(range(p.seq_len))}
