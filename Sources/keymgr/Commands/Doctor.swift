import ArgumentParser
import Foundation
import KeyManager
import Sync

/// `keymgr doctor [--json]`: one line per check, each naming what is wrong and the one thing to do.
struct DoctorCommand: KeymgrCommand {
    static let configuration = CommandConfiguration(
        commandName: "doctor",
        abstract: "Check this device's agent, store, master key, disk, sync, server and TPM; say what is wrong and what to do.",
        discussion: """
            One line per check: `ok` or `FAIL`, its name (agent, store.files, store.schema, store.integrity, \
            masterKey, disk, sync, server or server.PROFILE, tpm), what was found and, for a failure, the one thing to \
            do. Writes nothing; sends the TPM only capability and NV_ReadPublic queries (nothing dictionary-attack \
            protected), so it is safe on a timer. The server check sends each profile's server one read-only request \
            with the admin credential (a device listing of an identity nobody has): it answers, its clock (Date) is \
            within 60 s of this device's, it accepts the credential. Through the agent, a person sees what concerns \
            them (their own keys and sync errors, never another person's); an administrator sees everything. Run \
            directly as root on the agent's store, the store may be the keymgr account's, and the master key (the \
            agent's systemd credential) is checked where keymgr.service loads it from; whether it opens the store is \
            seen through the agent. Exit 0 \
            when every check holds, 1 otherwise. With --json (for fleet tools): \
            {"ok", "checks": [{"name", "ok", "message", "fix"}]}.

            Example:
              keymgr doctor
              keymgr doctor --json
            """)

    @OptionGroup var globals: GlobalOptions

    @Option(help: ArgumentHelp("Seconds to wait for each server's answer.", valueName: "s"))
    var timeout: Double = 10

    func validate() throws {
        try DurationOption.check(timeout, "--timeout")
    }

    func run(in context: CommandContext) throws {
        let timeout = timeout
        var checks = Doctor.run(home: globals.storeHome(in: context), context: context.request,
                                environment: context.environment) { manager in
            (try? AsyncBridge.wait { await ServerProbe.checks(manager, timeout: timeout) }) ?? [ServerProbe.unfinished]
        }
        let serving = Status.agent(context.request).map {
            Doctor.ServingAgent(socket: $0.socket, policy: $0.policy, policyProblem: $0.policyChecks ? nil : $0.policyProblem ?? "?")
        }
        checks.insert(Doctor.agent(serving, context: context.request), at: 0)
        try globals.render(DoctorOutput(checks: checks), in: context)
        if checks.contains(where: { !$0.ok }) { throw ExitCode.failure }
    }
}

/// `doctor`: `{"ok","checks":[…]}`, or one line per check.
struct DoctorOutput: DocumentOutput {
    let checks: [DoctorCheck]

    struct Document: Encodable {
        struct Check: Encodable {
            let name: String
            let ok: Bool
            let message: String
            let fix: String?
        }
        let ok: Bool
        let checks: [Check]
    }

    var document: Document {
        Document(ok: checks.allSatisfy(\.ok),
                 checks: checks.map { Document.Check(name: $0.name, ok: $0.ok, message: $0.message, fix: $0.fix) })
    }

    /// One check a line (wrapped to the table width, continued under the message), the fix on a line of its own.
    func text(on console: Console) {
        let width = checks.map(\.name.count).max() ?? 0
        let indent = 6 + width + 2
        let columns = max(console.tableWidth, indent + 20)
        var lines: [String] = []
        for check in checks {
            let head = (check.ok ? "ok    " : "FAIL  ") + check.name + String(repeating: " ", count: width - check.name.count + 2)
            lines += Self.wrapped(TextTable.printable(check.message), first: head, indent: indent, columns: columns)
            if let fix = check.fix {
                lines += Self.wrapped("fix: " + TextTable.printable(fix), first: String(repeating: " ", count: indent),
                                      indent: indent + 5, columns: columns)
            }
        }
        console.answer(lines.joined(separator: "\n"))
    }

    /// `text` after `first`, broken between words so no line is wider than `columns` (a word wider stays whole).
    static func wrapped(_ text: String, first: String, indent: Int, columns: Int) -> [String] {
        var lines: [String] = []
        var line = first
        var empty = true
        for word in text.split(separator: " ", omittingEmptySubsequences: true) {
            if !empty && line.count + 1 + word.count > columns {
                lines.append(line)
                line = String(repeating: " ", count: indent)
                empty = true
            }
            line += (empty ? "" : " ") + word
            empty = false
        }
        lines.append(line)
        return lines
    }
}
