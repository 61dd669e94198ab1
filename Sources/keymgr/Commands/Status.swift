import AgentWire
import ArgumentParser
import Foundation
import KeyManager

/// `keymgr status`: the device and how much the store holds.
struct Status: KeymgrCommand {
    static let configuration = CommandConfiguration(
        commandName: "status",
        abstract: "Show this device's identity, its agent, its server, its last sync and what the store holds.",
        discussion: """
            `keys` counts usable (active or locked) keys. With --json: \
            {"deviceId", "deviceName", "schemaVersion", "users", "keys", "keysByState", "pinKeys", "lastSync", \
            "lastSyncRun", "servers", "agent", "pinThrottle", "keyBackend", "keyBackendReason", "tpmTcti", \
            "masterKey", "serverClockSkew", "tpmReplaced"}. "tpmReplaced" is set when the store's TPM was cleared or \
            replaced (its rollback counter is gone from the TPM at the TCTI): {"tcti", "why", "unusableKeys": \
            [{"kid", "userId"}]}, else null. "serverClockSkew" lists the server \
            profiles whose clock, as their answers' Date header showed it, is more than 60 s from this device's: \
            [{"server", "seconds"}], seconds the server is ahead (negative: behind). `keyBackend` is where new keys live (software or tpm) \
            and `keyBackendReason` why init chose it. `masterKey` is where this process took the master key from: \
            {"source": "home" | "tpm" | "KEYMGR_MASTER_KEY_FILE" | "systemd-credential", "path", "tcti"} \
            (`tcti` only for a key sealed to a TPM). `agent` is the agent that served the request \
            {"socket", "policy", "policyChecks", "policyProblem"} (null when the command opened the store itself). \
            `keysByState` counts keys by status; `pinKeys` lists active and locked APPLICATION_PIN keys with the \
            wrong PINs each still takes ({"kid", "userId", "status", "attemptsLeft"}); `lastSyncRun` is the last \
            sync ({"server", "startedAt", "finishedAt", "result": "ok" | "partial" | "unfinished", and its counts}); \
            `pinThrottle` is the wrong-PIN throttle of accounts guessing other people's PINs (through the agent: \
            yours only). Through the agent, keys are those of the users you may see.

            Example:
              keymgr status --json
            """)

    @OptionGroup var globals: GlobalOptions

    func run(in context: CommandContext) throws {
        let manager = try globals.openManager(in: context, readOnly: true)
        let status = try manager.status()
        try globals.render(StatusOutput(status: status, home: globals.storeHome(in: context).url.path, agent: Self.agent(context.request),
                                        served: context.request.isServed), in: context)
        Status.warnAboutTPMReach(status, globals.console(in: context))
    }

    /// The agent serving `request`, and whether its policy file loads as it is now; nil run directly.
    static func agent(_ request: RequestContext) -> StatusJSON.AgentJSON? {
        guard request.isServed, let policy = request.policy else { return nil }
        var problem: String?
        do {
            _ = try AgentPolicy.load(path: policy.file, agentUID: getuid())
        } catch {
            problem = PrintableText.stripped((error as? any KeymgrFailure)?.message ?? String(describing: error))
        }
        return StatusJSON.AgentJSON(socket: AgentGate.socket ?? AgentCommand.defaultSocket, policy: policy.file,
                                    policyChecks: problem == nil, policyProblem: problem)
    }
}

extension Status {
    /// W11: a store whose keys or master key are reached through a network TCTI is said on stderr (with --json too).
    static func warnAboutTPMReach(_ status: StoreStatus, _ console: Console) {
        for tcti in Set([status.tpmTcti, status.masterKeyTCTI].compactMap { $0 }).sorted() {
            if let warning = TCTIReach.warning(tcti) { console.warn(warning) }
        }
    }
}

/// `status`: `StatusJSON`, or aligned `name  value` lines.
struct StatusOutput: DocumentOutput {
    let status: StoreStatus
    let home: String
    var agent: StatusJSON.AgentJSON?
    /// Whether the agent serves the request (what to do about a replaced TPM differs).
    var served = false

    var document: StatusJSON { StatusJSON(status, agent: agent) }

    func text(on console: Console) {
        let byState = KeyStatus.allCases.map { "\(status.keysByState[$0] ?? 0) \($0.rawValue)" }.joined(separator: ", ")
        var lines: [(String, String)] = [
            ("home", home),
            ("agent", agent.map { "\($0.socket), policy \($0.policy) "
                + ($0.policyChecks ? "(checks)" : "(does not load: \($0.policyProblem ?? "?"))") }
                ?? "none: this command opened the store itself"),
            ("device id", status.deviceId),
            // MAC'd with the device row, and printed without controls or bidi characters all the same.
            ("device name", TextTable.printable(status.deviceName)),
            ("schema version", String(status.schemaVersion)),
            ("users", String(status.users)),
            ("keys", "\(status.keys) usable (\(byState))"),
            ("server", status.servers.isEmpty ? "none"
                : status.servers.map { "\(TextTable.printable($0.name)): \($0.dialect) \(TextTable.printable($0.baseURL))" }
                    .joined(separator: "; ")),
            ("last sync", status.lastSyncRun.map(Status.syncRun) ?? "never"),
        ]
        for key in status.pinKeys {
            lines.append(("PIN key \(HumanText.kid(key.kid, wide: false))", "\(TextTable.printable(key.userId)): "
                + (key.status == .locked ? "locked" : "\(key.attemptsLeft) wrong PIN\(key.attemptsLeft == 1 ? "" : "s") left")))
        }
        for throttle in status.pinThrottles {
            lines.append(("PIN throttle", "\(TextTable.printable(throttle.login)) (uid \(throttle.uid)): "
                + (throttle.blockedUntil.map { "PINs for other people's keys wait until \(HumanText.time($0))" }
                   ?? "\(throttle.failures) wrong PIN\(throttle.failures == 1 ? "" : "s") for other people's keys")))
        }
        lines += [
            ("key backend", status.keyBackend.rawValue + (status.keyBackendReason.map { " (\($0))" } ?? "")),
        ] + (status.tpmTcti.map { [("tpm tcti", $0)] } ?? []) + [("master key", Status.masterKey(status))]
        for skew in status.serverClockSkews { lines.append(("clock skew", Status.skew(skew))) }
        if let replaced = status.tpmReplaced { lines.append(("tpm", Status.replaced(replaced, served: served))) }
        let width = lines.map(\.0.count).max() ?? 0
        console.answer(lines.map { $0.0 + String(repeating: " ", count: width - $0.0.count + 2) + $0.1 }
            .joined(separator: "\n"))
    }
}

extension Status {
    /// The last sync run in a line: when, and what it found.
    static func syncRun(_ run: SyncRun) -> String {
        guard let finished = run.finishedAt else {
            return "started \(HumanText.time(run.startedAt)) against \(run.server), never finished"
        }
        let counts = "\(run.users) user\(run.users == 1 ? "" : "s"), \(run.inSync) in sync, \(run.registered) registered, "
            + "\(run.revoked) revoked, \(run.errors) failed"
        return "\(HumanText.time(finished)) against \(run.server): \(run.errors > 0 ? "partial" : "ok") (\(counts))"
    }

    /// "this device is 600 s behind server default's clock: check its time (timedatectl)".
    static func skew(_ skew: ServerClockSkew) -> String {
        let direction = skew.seconds > 0 ? "behind" : "ahead of"
        return "this device is \(abs(skew.seconds)) s \(direction) server \(TextTable.printable(skew.serverName))'s clock: "
            + "check its time (timedatectl)"
    }

    /// "the TPM at … was cleared or replaced (…): 2 keys are unusable: 1A2B3C4D (alice), …; …".
    static func replaced(_ replaced: TPMReplacement, served: Bool) -> String {
        let keys = replaced.unusableKeys.map { "\(HumanText.kid($0.kid, wide: false)) (\(TextTable.printable($0.userId)))" }
        let count = keys.count == 1 ? "1 key is" : "\(keys.count) keys are"
        return "\(replaced.why): \(count) unusable\(keys.isEmpty ? "" : ": " + keys.joined(separator: ", ")); "
            + (!served ? "an administrator runs `keymgr tpm recover`, then they are bound again"
               : "an administrator recovers the TPM, then they are bound again")
    }

    /// Where the master key came from, e.g. "tpm (sealed to swtpm:path=…, blob in /home/master.tpm)".
    static func masterKey(_ status: StoreStatus) -> String {
        let location = status.masterKeyLocation ?? ""
        switch status.masterKeySource {
        case "tpm": return "tpm (sealed to \(status.masterKeyTCTI ?? "?"); blob in \(location))"
        default: return "\(status.masterKeySource) (\(location))"
        }
    }
}
