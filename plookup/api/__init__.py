"""API: plookup.Llama (llama_cpp's entry points on the engine), each call's stats and Predicted Outputs."""
