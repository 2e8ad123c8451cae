"""The filter's number and boolean conversions against Java itself: store.filter.sql_values' Integer.parseInt,
Long.parseLong, Double.valueOf and Boolean.valueOf are compared with the JDK's on the same strings,
run once by the machine's `java` (a single-file source program, no build step)."""

from __future__ import annotations

import random
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from store.filter.sql_values import EvalAborted, double_bits, java_boolean, java_parse_double, java_parse_integer

pytestmark = pytest.mark.timeout(120)

JAVA_PROGRAM = """
import java.nio.charset.StandardCharsets;
import java.nio.file.*;

public class Conversions {
    public static void main(String[] args) throws Exception {
        StringBuilder out = new StringBuilder();
        for (String line : Files.readAllLines(Paths.get(args[0]), StandardCharsets.US_ASCII)) {
            byte[] raw = new byte[line.length() / 2];
            for (int i = 0; i < raw.length; i++) raw[i] = (byte) Integer.parseInt(line.substring(2 * i, 2 * i + 2), 16);
            String s = new String(raw, StandardCharsets.UTF_8);
            try { out.append(Integer.parseInt(s)); } catch (NumberFormatException e) { out.append('X'); }
            out.append(' ');
            try { out.append(Long.parseLong(s)); } catch (NumberFormatException e) { out.append('X'); }
            out.append(' ');
            try { out.append(Long.toHexString(Double.doubleToLongBits(Double.valueOf(s)))); } catch (NumberFormatException e) { out.append('X'); }
            out.append(' ').append(Boolean.valueOf(s)).append('\\n');
        }
        System.out.print(out);
    }
}
"""

EDGES = [
    "", "0", "-0", "+0", "-", "+", "+-1", "2147483647", "2147483648", "-2147483648", "-2147483649",
    "9223372036854775807", "9223372036854775808", "-9223372036854775808", "-9223372036854775809",
    "0000000000000000000000000000000000000012", " 1", "1 ", "1_000", "١٢٣", "-٣", "०९", "０１", "𝟎", "1\ufffd",
    "1.5", "-1.5e3", "1.", ".5", ".", "-.5E-3", "1e", "1e+", "1e+5", "1E-400", "1e400", "-1e400", "4.9e-324", "2.4e-324",
    "2.5e-324", "1.7976931348623157e308", "1.7976931348623159e308", "0.1f", "1d", "1D ", "1ff", "1.5e5f", "\t\n 7.25 \x00",
    "NaN", "-NaN", "+Infinity", "-Infinity", "Infinity", "infinity", "nan", "NaNd", "0x1p3", "0X1.8P1", "-0x.8p1", "0x1.p0",
    "0x1", "0xp1", "0x1p", "0x1p99999", "0x1p-99999", "0x0p99999999999", "0x1p99999999999", "-0x1p-99999999999",
    "0x1.fffffffffffff8p1023", "0x1.00000000000008p0", "0x1.00000000000018p0", "0x1p1f", "0x1p1d", " 0x10p0 ",
    "true", "TRUE", "tRuE", "true ", "false", "yes", "trueX",
    "12345678901234567890123456789012345678901234567890.5e-30", "9007199254740993", "9007199254740993.0",
    "0." + "0" * 400 + "1e400", "1" * 300 + "e-300", "2.2250738585072011e-308", "2.2250738585072012e-308",
]  # fmt: skip
ALPHABET = list("0123456789") * 4 + list("+-.eExXpPfFdD \t\x00ab") + ["٣", "０", "𝟏", "é", "NaN", "Infinity", "0x"]


def corpus() -> list[str]:
    rng = random.Random(7)
    made = [("".join(rng.choice(ALPHABET) for _ in range(rng.randint(1, 12)))) for _ in range(3000)]
    digits = [rng.choice(["", "-", "+"]) + str(rng.randint(0, 10 ** rng.randint(1, 25))) for _ in range(500)]
    floats = [repr(rng.uniform(-1e6, 1e6) * 10.0 ** rng.randint(-320, 300)) for _ in range(500)]
    return EDGES + made + digits + floats


def python_line(s: str) -> str:
    def attempt(f: Callable[[], str]) -> str:
        try:
            return f()
        except EvalAborted:
            return "X"

    as_int = attempt(lambda: str(java_parse_integer(s, 32)))
    as_long = attempt(lambda: str(java_parse_integer(s, 64)))
    as_double = attempt(lambda: format(double_bits(java_parse_double(s)) & (1 << 64) - 1, "x"))
    return f"{as_int} {as_long} {as_double} {str(java_boolean(s)).lower()}"


def test_conversions_agree_with_the_jdk(tmp_path: Path) -> None:
    java = shutil.which("java")
    if java is None:
        pytest.skip("no java on this machine")
    source = tmp_path / "Conversions.java"
    source.write_text(JAVA_PROGRAM)
    strings = corpus()
    inputs = tmp_path / "inputs.txt"
    inputs.write_text("".join(s.encode("utf-8").hex() + "\n" for s in strings))
    ran = subprocess.run([java, str(source), str(inputs)], capture_output=True, text=True, timeout=100)
    assert ran.returncode == 0, ran.stderr
    answers = ran.stdout.splitlines()
    assert len(answers) == len(strings)
    differ = [(s, want, python_line(s)) for s, want in zip(strings, answers, strict=True) if python_line(s) != want]
    assert differ == [], differ[:10]
