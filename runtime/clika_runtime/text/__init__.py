"""Text: the tokenizer wrapper, the streaming detokenizer and the stop-string matcher."""
