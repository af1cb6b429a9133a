"""Steps several kinds share, declared once, by subject. A kind imports them from here and
never from another kind's module (tests/test_structure.py holds that).

    literals    numbers written into formulas (`excel_number`)
    labels      label sets: positions, source|target sequences (`TwoSequenceKind`)
    attention   single-head sizes, X/W_Q/W_K/W_V, projections, scaled scores, the causal
                mask, A·V, the weights chart
    heads       heads as column slices: grouped-head sizes and weights, one head's steps,
                the concatenation and W_O
    additive    Bahdanau's score: both sides projected, tanh of every pair, times v
    softmax     the row softmax in four visible steps (max, exp, sum, divide): over every
                row, with a causal mask, or over the last row only
    norms       LayerNorm and RMSNorm
    ffn         activations (ReLU, GELU tanh and exact, SiLU) and the feed-forward network
    embedding   token ids to embedding rows (INDEX per cell, one-hot·table in blocks)
    layers      a residual, a whole encoder layer and a GPT-2 block, and `scoped_sections`,
                which stacks a layer's sections as _L1, _L2, …
    recurrence  the selective scan's steps (Δ, Ā, B̄u, h_t, y_t)
    rotary      RoPE: the angles, cos and sin, and a rotated block
    costs       the live cost table
"""
