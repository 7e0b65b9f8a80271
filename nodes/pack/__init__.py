"""The pack's engine-independent layer: the engine contract and registry, the Speak pipeline (text
segmentation, reference audio, joining), the pack's runtime, the nodes every engine shares (loader factory,
Speak, Runtime settings), the panel's route, verify and the generated model docs."""
