set terminal pngcairo size 900,760 noenhanced
set output 'score_vs_compression_SmolLM2-135M-Instruct.Q4_1.gguf.png'
set xlabel 'compression ratio'
set ylabel 'score (0-100)'
set title 'SmolLM2-135M-Instruct.Q4_1.gguf: ruler, query-agnostic'
set key below left Left reverse
set grid
set xrange [0:1.02]
set yrange [0:*]
plot 'score_vs_compression_SmolLM2-135M-Instruct.Q4_1.gguf.dat' index 0 using 1:2:3 with yerrorlines title 'adakv_expected_attention_e2', 'score_vs_compression_SmolLM2-135M-Instruct.Q4_1.gguf.dat' index 1 using 1:2:3 with yerrorlines title 'adakv_expected_attention_e2 (sinks=4, window=128)', 'score_vs_compression_SmolLM2-135M-Instruct.Q4_1.gguf.dat' index 2 using 1:2:3 with yerrorlines title 'expected_attention', 'score_vs_compression_SmolLM2-135M-Instruct.Q4_1.gguf.dat' index 3 using 1:2:3 with yerrorlines title 'h2o', 'score_vs_compression_SmolLM2-135M-Instruct.Q4_1.gguf.dat' index 4 using 1:2:3 with yerrorlines title 'knorm', 'score_vs_compression_SmolLM2-135M-Instruct.Q4_1.gguf.dat' index 5 using 1:2:3 with yerrorlines title 'knorm (sinks=4, window=128)', 'score_vs_compression_SmolLM2-135M-Instruct.Q4_1.gguf.dat' index 6 using 1:2:3 with yerrorlines title 'kvzap smollm2-135m-linear (rule=threshold, sinks=4)', 'score_vs_compression_SmolLM2-135M-Instruct.Q4_1.gguf.dat' index 7 using 1:2:3 with yerrorlines title 'kvzap smollm2-135m-mlp (rule=threshold, sinks=4)', 'score_vs_compression_SmolLM2-135M-Instruct.Q4_1.gguf.dat' index 8 using 1:2:3 with yerrorlines title 'pyramidkv', 'score_vs_compression_SmolLM2-135M-Instruct.Q4_1.gguf.dat' index 9 using 1:2:3 with yerrorlines title 'random', 'score_vs_compression_SmolLM2-135M-Instruct.Q4_1.gguf.dat' index 10 using 1:2:3 with yerrorlines title 'snapkv', 'score_vs_compression_SmolLM2-135M-Instruct.Q4_1.gguf.dat' index 11 using 1:2:3 with yerrorlines title 'streaming_llm', 'score_vs_compression_SmolLM2-135M-Instruct.Q4_1.gguf.dat' index 12 using 1:2:3 with yerrorlines title 'tova'
