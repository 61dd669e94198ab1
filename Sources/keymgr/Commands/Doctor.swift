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
            them (their own keys and sync errors, never another person's); an administrator sees everything. Exit 0 \
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

    func run() throws {
        let timeout = timeout
        var checks = Doctor.run(home: globals.storeHome, context: ServedRequest.context,
                                environment: ProcessEnvironment.variables) { manager in
            Self.serverChecks(manager, timeout: timeout)
        }
        checks.insert(Self.agentCheck(), at: 0)
        try globals.render(DoctorOutput(checks: checks))
        if checks.contains(where: { !$0.ok }) { throw ExitCode.failure }
    }

    /// Each server profile's check (none when no server is configured: `sync` says so).
    static func serverChecks(_ manager: KeyManager, timeout: TimeInterval) -> [DoctorCheck] {
        guard let profiles = try? manager.serverProfiles().map(\.name), !profiles.isEmpty else { return [] }
        return profiles.map { profile in
            (try? AsyncBridge.wait { await ServerProbe.check(manager, profile: profile, timeout: timeout) })
                ?? DoctorCheck(profile == "default" ? "server" : "server.\(profile)", ok: false,
                               "the server check did not finish", fix: "run `keymgr doctor` again")
        }
    }

    /// The agent: through it, its socket and whether its policy file, as it is now, loads (the running agent keeps
    /// the policy it loaded; a restart would meet this one). Run directly, the systemd units' state when systemd
    /// runs this system.
    static func agentCheck() -> DoctorCheck {
        if let agent = Status.agent() {
            guard agent.policyChecks else {
                let administrator = ServedRequest.context.scope?.coversAllUsers != false
                // A person is told where, not what: the policy's lines name other people.
                let problem = agent.policyProblem ?? "?"
                let said = administrator ? problem
                    : String(problem.prefix(while: { $0 != " " })).trimmingCharacters(in: CharacterSet(charactersIn: ":"))
                return DoctorCheck("agent", ok: false, "the agent at \(agent.socket) serves, but its policy \(agent.policy) "
                    + "as it is now does not load (\(said)): the next restart of keymgr.service will fail",
                    fix: administrator ? "correct it, then check it with `keymgr agent --check-policy \(agent.policy)`"
                        : "ask the device's administrator to correct the agent's policy")
            }
            return DoctorCheck("agent", ok: true, "served by the agent at \(agent.socket); its policy \(agent.policy) loads")
        }
        if let failed = SystemdUnits.failed(["keymgr.socket", "keymgr.service"]), !failed.isEmpty {
            return DoctorCheck("agent", ok: false, "\(failed.joined(separator: " and ")) failed (a policy that did not "
                + "load, or systemd's start limit): people's commands find no agent",
                fix: "check the policy with `keymgr agent --check-policy`, then run `systemctl reset-failed keymgr.socket "
                    + "keymgr.service && systemctl start keymgr.socket`")
        }
        return DoctorCheck("agent", ok: true, "not used: this command opened the store itself")
    }
}

/// The state of systemd units, asked of `systemctl` when systemd runs this system (sd_booted: /run/systemd/system).
enum SystemdUnits {
    /// The units of `units` that are failed; nil when systemd does not run here or cannot be asked.
    static func failed(_ units: [String]) -> [String]? {
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: "/run/systemd/system", isDirectory: &isDirectory), isDirectory.boolValue,
              let systemctl = ["/usr/bin/systemctl", "/bin/systemctl"].first(where: { FileManager.default.isExecutableFile(atPath: $0) })
        else { return nil }
        return units.filter { unit in
            let process = Process()
            process.executableURL = URL(fileURLWithPath: systemctl)
            process.arguments = ["is-failed", "--quiet", unit]
            process.standardOutput = FileHandle.nullDevice
            process.standardError = FileHandle.nullDevice
            guard (try? process.run()) != nil else { return false }
            process.waitUntilExit()
            return process.terminationStatus == 0
        }
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
        let columns = max(TableWidth.current, indent + 20)
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
