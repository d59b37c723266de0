set terminal pngcairo size 900,640 noenhanced
set output 'fidelity_accuracy.png'
set title 'Smollm2 135M 8k Lc100K Mix1 Ep2: token accuracy along the generation'
set xlabel 'generated tokens'
set ylabel 'greedy agreement with the full cache'
set key below
set grid
plot 'fidelity_accuracy.dat' index 0 with linespoints title 'full', 'fidelity_accuracy.dat' index 1 with linespoints title 'full@models/kvpop/smollm2-135m-distill/model.gguf', 'fidelity_accuracy.dat' index 2 with linespoints title 'kvpop:model=smollm2-135m-mlstm,budget=369', 'fidelity_accuracy.dat' index 3 with linespoints title 'kvpop:model=smollm2-135m-distill,budget=369@models/kvpop/smollm2-135m-distill/model.gguf', 'fidelity_accuracy.dat' index 4 with linespoints title 'streaming_llm:window=365,sinks=4', 'fidelity_accuracy.dat' index 5 with linespoints title 'streaming_llm:window=365,sinks=4@models/kvpop/smollm2-135m-streaming_plus/model.gguf'
