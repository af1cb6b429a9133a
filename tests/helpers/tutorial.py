"""The PyTorch translation tutorial's encoder and attention decoder as it writes them, and
their state dicts saved in one file, keys under encoder. and decoder. (the checkpoint
`seq2seq --checkpoint` reads)."""


def tutorial_modules(src_vocab: int, tgt_vocab: int, hidden: int, seed: int,
                     bidirectional: bool = False):
    """The tutorial's three modules as it writes them (its MAX_LENGTH, SOS_token and
    device made arguments), in float64 and eval mode, with their own random init;
    `bidirectional`, the encoder's GRU runs both ways and its outputs are combined as
    PyTorch's chatbot tutorial does (the sum of the two directions, the forward h_n as the
    decoder's first state)."""
    import torch
    from torch import nn
    from torch.nn import functional as F  # noqa: N812  (the tutorial's name)

    class EncoderRNN(nn.Module):
        def __init__(self, input_size, hidden_size, dropout_p=0.1):
            super().__init__()
            self.hidden_size = hidden_size
            self.embedding = nn.Embedding(input_size, hidden_size)
            self.gru = nn.GRU(hidden_size, hidden_size, batch_first=True,
                              bidirectional=bidirectional)
            self.dropout = nn.Dropout(dropout_p)

        def forward(self, input):
            embedded = self.dropout(self.embedding(input))
            output, hidden = self.gru(embedded)
            if bidirectional:  # the chatbot tutorial's sum; its encoder_hidden[:n_layers]
                size = self.hidden_size
                output, hidden = output[:, :, :size] + output[:, :, size:], hidden[:1]
            return output, hidden

    class BahdanauAttention(nn.Module):
        def __init__(self, hidden_size):
            super().__init__()
            self.Wa = nn.Linear(hidden_size, hidden_size)
            self.Ua = nn.Linear(hidden_size, hidden_size)
            self.Va = nn.Linear(hidden_size, 1)

        def forward(self, query, keys):
            scores = self.Va(torch.tanh(self.Wa(query) + self.Ua(keys)))
            scores = scores.squeeze(2).unsqueeze(1)
            weights = F.softmax(scores, dim=-1)
            context = torch.bmm(weights, keys)
            return context, weights

    class AttnDecoderRNN(nn.Module):
        def __init__(self, hidden_size, output_size, dropout_p=0.1):
            super().__init__()
            self.embedding = nn.Embedding(output_size, hidden_size)
            self.attention = BahdanauAttention(hidden_size)
            self.gru = nn.GRU(2 * hidden_size, hidden_size, batch_first=True)
            self.out = nn.Linear(hidden_size, output_size)
            self.dropout = nn.Dropout(dropout_p)

        def forward(self, encoder_outputs, encoder_hidden, target_tensor=None, *,
                    max_length, sos_token, attention=True):
            batch_size = encoder_outputs.size(0)
            decoder_input = torch.empty(batch_size, 1, dtype=torch.long).fill_(sos_token)
            decoder_hidden = encoder_hidden
            decoder_outputs = []
            attentions = []
            for i in range(max_length):
                decoder_output, decoder_hidden, attn_weights = self.forward_step(
                    decoder_input, decoder_hidden, encoder_outputs, encoder_hidden, attention)
                decoder_outputs.append(decoder_output)
                attentions.append(attn_weights)
                if target_tensor is not None:
                    decoder_input = target_tensor[:, i].unsqueeze(1)  # Teacher forcing
                else:
                    _, topi = decoder_output.topk(1)
                    decoder_input = topi.squeeze(-1).detach()
            decoder_outputs = torch.cat(decoder_outputs, dim=1)
            decoder_outputs = F.log_softmax(decoder_outputs, dim=-1)
            attentions = torch.cat(attentions, dim=1) if attention else None
            return decoder_outputs, decoder_hidden, attentions

        def forward_step(self, input, hidden, encoder_outputs, encoder_hidden, attention):
            embedded = self.dropout(self.embedding(input))
            query = hidden.permute(1, 0, 2)
            if attention:
                context, attn_weights = self.attention(query, encoder_outputs)
            else:  # the bottleneck: the encoder's last state at every step
                context, attn_weights = encoder_hidden.permute(1, 0, 2), None
            input_gru = torch.cat((embedded, context), dim=2)
            output, hidden = self.gru(input_gru, hidden)
            output = self.out(output)
            return output, hidden, attn_weights

    torch.manual_seed(seed)
    encoder = EncoderRNN(src_vocab, hidden).double().eval()
    decoder = AttnDecoderRNN(hidden, tgt_vocab).double().eval()
    return encoder, decoder


def save_state_dicts(path, encoder, decoder, extra=None, drop=()):
    """The two modules' state dicts in one file, keys under encoder. and decoder."""
    import torch

    state = {**{f"encoder.{k}": v for k, v in encoder.state_dict().items()},
             **{f"decoder.{k}": v for k, v in decoder.state_dict().items()}, **(extra or {})}
    torch.save({k: v for k, v in state.items() if k not in drop}, path)
    return path
