"""SPEAR ``speech_quality``: MOS of the answer audio (UTMOS22 / DNSMOS / DistillMOS) and WER/CER of its ASR."""
