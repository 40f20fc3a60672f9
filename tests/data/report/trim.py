"""Keep only the lines fp8spec report reads (and each traceback through its exception line); every kept line is
unchanged. python tests/data/report/trim.py SOURCE DEST"""

import re
import sys

KEEP = re.compile(
    r"step:\d+ - |fp8spec (kv_scales|direct_sync: (plan|sync \d)|weight sync sent|fast_block_quant|te_report"
    r"|mbridge_compat|te_extra_state_compat|kept_buffer)|GPU KV cache size|Training Progress"
    r"|Traceback \(most recent|FP8SPEC_RUNTIME_PATCHES|Error executing job|^:job_id|^:actor_name"
    r"|'total_training_steps': \d"
)
RAY_PREFIX = re.compile(r"^(\x1b\[[0-9;]*m)?\([\w.:-]+ pid=\d+(?:, ip=[\d.]+)?\)(\x1b\[[0-9;]*m)?\s?")


def trim(src: str, dst: str) -> int:
    out, tail = [], 0
    with open(src, encoding="utf-8", errors="surrogateescape", newline="") as fh:
        for line in fh:
            plain = RAY_PREFIX.sub("", line)
            if "Traceback (most recent" in line:
                tail = 80
            elif tail > 0 and plain.strip() and not plain.startswith((" ", "\t")):
                out.append(line)  # the exception's own line ends the traceback
                tail = 0
                continue
            if KEEP.search(line) or tail > 0:
                out.append(line)
            tail -= 1
    with open(dst, "w", encoding="utf-8", errors="surrogateescape", newline="") as fh:
        fh.write("".join(out))
    return len(out)


if __name__ == "__main__":
    print(sys.argv[2], trim(sys.argv[1], sys.argv[2]))
