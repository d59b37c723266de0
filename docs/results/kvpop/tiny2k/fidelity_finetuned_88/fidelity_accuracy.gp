set terminal pngcairo size 900,640 noenhanced
set output 'fidelity_accuracy.png'
set title 'kvsieve-tiny-2k: token accuracy along the generation'
set xlabel 'generated tokens'
set ylabel 'greedy agreement with the full cache'
set key below
set grid
plot 'fidelity_accuracy.dat' index 0 with linespoints title 'full', 'fidelity_accuracy.dat' index 1 with linespoints title 'full@models/kvpop/tiny2k-distill/model.gguf', 'fidelity_accuracy.dat' index 2 with linespoints title 'kvpop:model=tiny2k-mlstm,budget=246', 'fidelity_accuracy.dat' index 3 with linespoints title 'kvpop:model=tiny2k-distill,budget=246@models/kvpop/tiny2k-distill/model.gguf', 'fidelity_accuracy.dat' index 4 with linespoints title 'streaming_llm:window=242,sinks=4', 'fidelity_accuracy.dat' index 5 with linespoints title 'streaming_llm:window=242,sinks=4@models/kvpop/tiny2k-streaming_plus/model.gguf'
