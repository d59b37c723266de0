set terminal pngcairo size 900,760 noenhanced
set output 'score_vs_compression_SmolLM2-135M-Instruct.Q4_1.gguf_chat.png'
set xlabel 'compression ratio'
set ylabel 'score (0-100)'
set title 'SmolLM2-135M-Instruct.Q4_1.gguf: ruler, query-agnostic, chat prompts'
set key below left Left reverse
set grid
set xrange [0:1.02]
set yrange [0:*]
plot 'score_vs_compression_SmolLM2-135M-Instruct.Q4_1.gguf_chat.dat' index 0 using 1:2:3 with yerrorlines lc rgb '#332288' dt 1 pt 1 title 'adakv_expected_attention_e2', 'score_vs_compression_SmolLM2-135M-Instruct.Q4_1.gguf_chat.dat' index 1 using 1:2:3 with yerrorlines lc rgb '#88CCEE' dt 1 pt 2 title 'expected_attention', 'score_vs_compression_SmolLM2-135M-Instruct.Q4_1.gguf_chat.dat' index 2 using 1:2:3 with yerrorlines lc rgb '#44AA99' dt 1 pt 3 title 'h2o', 'score_vs_compression_SmolLM2-135M-Instruct.Q4_1.gguf_chat.dat' index 3 using 1:2:3 with yerrorlines lc rgb '#117733' dt 1 pt 4 title 'knorm', 'score_vs_compression_SmolLM2-135M-Instruct.Q4_1.gguf_chat.dat' index 4 using 1:2:3 with yerrorlines lc rgb '#999933' dt 1 pt 5 title 'pyramidkv', 'score_vs_compression_SmolLM2-135M-Instruct.Q4_1.gguf_chat.dat' index 5 using 1:2:3 with yerrorlines lc rgb '#DDCC77' dt 1 pt 6 title 'random', 'score_vs_compression_SmolLM2-135M-Instruct.Q4_1.gguf_chat.dat' index 6 using 1:2:3 with yerrorlines lc rgb '#CC6677' dt 1 pt 7 title 'snapkv', 'score_vs_compression_SmolLM2-135M-Instruct.Q4_1.gguf_chat.dat' index 7 using 1:2:3 with yerrorlines lc rgb '#882255' dt 1 pt 8 title 'streaming_llm', 'score_vs_compression_SmolLM2-135M-Instruct.Q4_1.gguf_chat.dat' index 8 using 1:2:3 with yerrorlines lc rgb '#AA4499' dt 1 pt 9 title 'tova'
