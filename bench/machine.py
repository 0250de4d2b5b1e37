"""The machine a benchmark ran on, as the benchmark pages name it: the CPU's model name, family and
model numbers, and its CPU count."""
import os
import re


def cpu_name():
    with open("/proc/cpuinfo", encoding="utf-8") as f:
        info = f.read()
    name = re.search(r"model name\s*:\s*(.*)", info).group(1).strip()
    family = re.search(r"cpu family\s*:\s*(\d+)", info).group(1)
    model = re.search(r"^model\s*:\s*(\d+)", info, re.M).group(1)
    return f"{name} (family {family} model {model}), {os.cpu_count()} CPUs"
