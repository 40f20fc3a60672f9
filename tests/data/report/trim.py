"""Keep only the lines fp8spec report reads (and a traceback's lines); every kept line is unchanged."""
import re, sys
KEEP = re.compile(r"step:\d+ - |fp8spec (kv_scales|direct_sync: (plan|sync \d)|weight sync sent|fast_block_quant|te_report|mbridge_compat|te_extra_state_compat|kept_buffer)|GPU KV cache size|Training Progress|Traceback \(most recent|FP8SPEC_RUNTIME_PATCHES|Error executing job|^:job_id|^:actor_name")
src, dst = sys.argv[1], sys.argv[2]
out, tail = [], 0
for line in open(src, encoding="utf-8", errors="surrogateescape", newline=""):
    plain = re.sub(r"^(\x1b\[[0-9;]*m)?\([\w.:-]+ pid=\d+(?:, ip=[\d.]+)?\)(\x1b\[[0-9;]*m)?\s?", "", line)
    if "Traceback (most recent" in line:
        tail = 80
    elif tail > 0 and plain.strip() and not plain.startswith((" ", "\t")):
        out.append(line)  # the exception's own line ends the traceback
        tail = 0
        continue
    if KEEP.search(line) or tail > 0:
        out.append(line)
    tail -= 1
open(dst, "w", encoding="utf-8", errors="surrogateescape", newline="").write("".join(out))
print(dst, len(out))
