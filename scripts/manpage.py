#!/usr/bin/env python3
"""Writes keymgr(1) in man(7) format from the CLI's own help: `keymgr --experimental-dump-help` (swift-argument-parser's
ToolInfo JSON), so the manual says exactly what `--help` says. Usage: manpage.py [--prefix PREFIX] KEYMGR_CORE > keymgr.1
PREFIX is where `make install` puts the programs (default /usr/local; the Debian package's is /usr): FILES names the
real paths.
KEYMGR_CORE is the full program, keymgr-core (the `keymgr` client would hand the question to an agent when the
machine runs one); `keymgr` built beside it works too."""
import json
import subprocess
import sys


def roff(text):
    """Text safe in a man page: backslashes escaped, no line starting with a control character."""
    lines = []
    for line in (text or "").replace("\\", "\\e").split("\n"):
        if line.startswith((".", "'")):
            line = "\\&" + line
        lines.append(line)
    return "\n".join(lines)


def prose(text):
    """A command's discussion as man(7) text: sentences filled, indented lines (examples) kept as written."""
    out = []
    for block in (text or "").strip().split("\n\n"):
        lines = block.split("\n")
        filled = []
        index = 0
        while index < len(lines):
            if lines[index].startswith("  "):
                literal = []
                while index < len(lines) and lines[index].startswith("  "):
                    literal.append(lines[index])
                    index += 1
                if filled:
                    out += [roff(" ".join(filled))]
                    filled = []
                out += [".nf", ".RS 4"] + [roff(line[2:]) for line in literal] + [".RE", ".fi"]
            else:
                filled.append(lines[index].strip())
                index += 1
        if filled:
            out.append(roff(" ".join(filled)))
        out.append(".PP")
    return out


def option_synopsis(argument):
    names = argument.get("names") or []
    spelled = []
    for name in names:
        prefix = "-" if name["kind"] in ("short", "longWithSingleDash") else "--"
        spelled.append("\\fB" + prefix + roff(name["name"]) + "\\fR")
    value = argument.get("valueName")
    if argument.get("kind") == "positional":
        return "\\fI" + roff(value or "value") + "\\fR"
    text = ", ".join(spelled)
    if argument.get("kind") == "option":
        text += " \\fI" + roff(value or "value") + "\\fR"
    return text


def describe(argument):
    parts = [argument.get("abstract") or ""]
    if argument.get("allValues") and argument.get("kind") == "option":
        parts.append("One of: " + ", ".join(argument["allValues"]) + ".")
    default = argument.get("defaultValue")
    if default not in (None, "", "false", "[]"):
        parts.append("Default: " + default + ".")
    if argument.get("discussion"):
        parts.append(argument["discussion"] if isinstance(argument["discussion"], str) else "")
    return roff(" ".join(p for p in parts if p))


def visible_arguments(command):
    return [a for a in command.get("arguments") or [] if a.get("shouldDisplay", True)
            and not any(n["name"] in ("help", "version", "experimental-dump-help") for n in a.get("names") or [])]


GLOBAL = {"home", "json", "quiet", "verbose"}


def is_global(argument):
    return any(n["name"] in GLOBAL for n in argument.get("names") or [])


def section_for(command, path, out):
    name = " ".join(path)
    out.append(".SS " + roff(name))
    usage = command.get("usage")
    if not usage:
        words = [name]
        for argument in visible_arguments(command):
            if is_global(argument):
                continue
            synopsis = option_synopsis(argument)
            words.append(synopsis if not argument.get("isOptional") else "[" + synopsis + "]")
        usage = " ".join(words)
        out.append(usage)
    else:
        out.append("\\fB" + roff(usage) + "\\fR")
    out.append(".PP")
    if command.get("abstract"):
        out.append(roff(command["abstract"]))
        out.append(".PP")
    if command.get("discussion"):
        out += prose(command["discussion"])
    for argument in visible_arguments(command):
        if is_global(argument):
            continue
        out.append(".TP")
        out.append(option_synopsis(argument))
        out.append(describe(argument))
    for sub in command.get("subcommands") or []:
        if sub["commandName"] == "help":
            continue
        section_for(sub, path + [sub["commandName"]], out)


def main():
    arguments = sys.argv[1:]
    prefix = "/usr/local"
    if len(arguments) >= 2 and arguments[0] == "--prefix":
        prefix = arguments[1].rstrip("/") or "/"
        arguments = arguments[2:]
    if len(arguments) != 1:
        sys.exit("usage: manpage.py [--prefix PREFIX] KEYMGR_CORE > keymgr.1")
    binary = arguments[0]
    libexec = roff(prefix + "/libexec/keymgr/keymgr-core").replace("-", "\\-")
    units = roff(prefix + "/lib/systemd/system").replace("-", "\\-")
    docs = roff(prefix + "/share/doc/keymgr/").replace("-", "\\-")
    info = json.loads(subprocess.run([binary, "--experimental-dump-help"], check=True, capture_output=True,
                                     text=True).stdout)
    version = subprocess.run([binary, "--version"], check=True, capture_output=True, text=True).stdout.strip()
    root = info["command"]
    out = [
        '.TH KEYMGR 1 "" "keymgr ' + roff(version) + '" "User Commands"',
        ".SH NAME",
        "keymgr \\- " + roff(root.get("abstract") or "manage device-bound signing keys"),
        ".SH SYNOPSIS",
        "\\fBkeymgr\\fR [\\fIglobal options\\fR] \\fIcommand\\fR [\\fIoptions\\fR]",
        ".br",
        "\\fBkeymgr\\fR \\fB\\-\\-version\\fR",
        ".SH DESCRIPTION",
    ]
    if root.get("discussion"):
        out += prose(root["discussion"])
    out.append(".SH GLOBAL OPTIONS")
    out.append("Every command takes these, before or after its name.")
    for argument in visible_arguments(root):
        out += [".TP", option_synopsis(argument), describe(argument)]
    out += [".TP", "\\fB\\-h\\fR, \\fB\\-\\-help\\fR", "Show help for keymgr or a command (\\fBkeymgr help\\fR \\fIcommand\\fR)."]
    out.append(".SH COMMANDS")
    for sub in root.get("subcommands") or []:
        if sub["commandName"] == "help":
            continue
        section_for(sub, ["keymgr", sub["commandName"]], out)
    out += [
        ".SH ENVIRONMENT",
        ".TP", "\\fBKEYMGR_HOME\\fR", "The store's directory when \\fB\\-\\-home\\fR is not given.",
        ".TP", "\\fBKEYMGR_SOCKET\\fR",
        "The agent's socket when \\fB\\-\\-socket\\fR is not given: commands run in the agent, as the calling user.",
        ".TP", "\\fBKEYMGR_MASTER_KEY_FILE\\fR", "The master key file, instead of the one in the store's directory.",
        ".TP", "\\fBCOLUMNS\\fR", "The width tables fit (else the terminal's width, or 80 when stdout is not a terminal).",
        ".SH FILES",
        ".TP", "\\fI${XDG_DATA_HOME:\\-~/.local/share}/keymgr/\\fR", "The default store: \\fIkeymgr.db\\fR and its master key.",
        ".TP", "\\fI/run/keymgr/keymgr.sock\\fR",
        "The agent's socket: when it exists and neither \\fB\\-\\-home\\fR nor \\fBKEYMGR_HOME\\fR is given, "
        "commands go to the agent.",
        ".TP", "\\fI" + libexec + "\\fR",
        "The full program: \\fBkeymgr\\fR runs it for commands on a store it opens itself, and it runs the agent.",
        ".TP", "\\fI/etc/keymgr/policy.toml\\fR",
        "The agent's policy: who may do what through it (\\fBkeymgr\\-policy\\fR(5)). Check an edit with "
        "\\fBkeymgr agent \\-\\-check\\-policy\\fR before restarting the agent.",
        ".TP", "\\fI/var/lib/keymgr/\\fR",
        "The agent's store (\\fIkeymgr.db\\fR, its audit log and, unless systemd supplies it, its master key), "
        "owned by the \\fBkeymgr\\fR user.",
        ".TP", "\\fI/etc/credstore.encrypted/keymgr.master\\fR, \\fI/etc/credstore.encrypted/keymgr.admin\\fR",
        "The agent's master key and the identity server's admin token, as systemd encrypted credentials "
        "(\\fBsystemd\\-creds\\fR(1)); \\fBkeymgr.service\\fR decrypts them for the agent alone.",
        ".TP", "\\fI" + units + "/keymgr.socket\\fR, \\fIkeymgr.service\\fR, \\fIkeymgr\\-sync.service\\fR, "
        "\\fIkeymgr\\-sync.timer\\fR",
        "The agent's socket and service, and the periodic sync.",
        ".SH SEE ALSO",
        "\\fBkeymgr\\-policy\\fR(5), \\fBsystemctl\\fR(1), \\fBsystemd\\-creds\\fR(1), \\fBsystemd.socket\\fR(5), "
        "\\fBjournalctl\\fR(1); the guides in \\fI" + docs + "\\fR (README and docs).",
    ]
    sys.stdout.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
