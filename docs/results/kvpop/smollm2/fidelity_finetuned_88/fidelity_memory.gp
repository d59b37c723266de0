set terminal pngcairo size 900,640 noenhanced
set output 'fidelity_memory.png'
set title 'Smollm2 135M 8k Lc100K Mix1 Ep2: KV memory during generation'
set xlabel 'tokens in the sequence'
set ylabel 'KV cache (MiB)'
set key below
set grid
plot 'fidelity_memory.dat' index 0 with linespoints title 'full', 'fidelity_memory.dat' index 1 with linespoints title 'full@models/kvpop/smollm2-135m-distill/model.gguf', 'fidelity_memory.dat' index 2 with linespoints title 'kvpop:model=smollm2-135m-mlstm,budget=369', 'fidelity_memory.dat' index 3 with linespoints title 'kvpop:model=smollm2-135m-distill,budget=369@models/kvpop/smollm2-135m-distill/model.gguf', 'fidelity_memory.dat' index 4 with linespoints title 'streaming_llm:window=365,sinks=4', 'fidelity_memory.dat' index 5 with linespoints title 'streaming_llm:window=365,sinks=4@models/kvpop/smollm2-135m-streaming_plus/model.gguf'
