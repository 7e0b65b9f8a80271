"""Model parts more than one engine is built from, one block per file, in plain torch under upstream's
parameter names: decoder layers and the Qwen3 stack, sampling and the decoding loop, flow matching, mel
front ends, speech encoders (HuBERT, w2v-BERT, CAM++), codecs and vocoders (DAC, Vocos, HiFT, BigVGAN)."""
