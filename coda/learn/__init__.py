"""Learning: the instruction encoder (`text`), action-chunk policies (`policies`), and later the chunk
critic, Text2potential shaping and the SFT / AWR / critic-TD updates."""
