set terminal pngcairo size 900,760 noenhanced
set output 'score_vs_compression_SmolLM2-135M-Instruct.Q4_1.gguf_chat.png'
set xlabel 'compression ratio'
set ylabel 'score (0-100)'
set title 'SmolLM2-135M-Instruct.Q4_1.gguf: ruler, query-agnostic, chat prompts'
set key below left Left reverse
set grid
set xrange [0:1.02]
set yrange [0:*]
plot 'score_vs_compression_SmolLM2-135M-Instruct.Q4_1.gguf_chat.dat' index 0 using 1:2:3 with yerrorlines lc rgb '#332288' dt 1 pt 1 title 'kvzap smollm2-135m-linear (rule=threshold, sinks=4)'
