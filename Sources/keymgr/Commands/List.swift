import ArgumentParser
import KeyManager

/// `keymgr list`: the keys on this device.
struct List: KeymgrCommand {
    static let configuration = CommandConfiguration(
        commandName: "list",
        abstract: "List keys: active and locked ones unless --status says otherwise.",
        usage: "keymgr list [<options>] [--user <id>] [--status <status> ...]",
        discussion: """
            With --json: an array of key objects \
            {"kid", "userId", "username", "owner", "authType", "status", "serverState", "createdAt", "lastUsedAt", "deviceName"} \
            (owner: the login of the person linked to the key's identity user, or null), \
            and "pinAttemptsLeft" for an active or locked APPLICATION_PIN key: the wrong PINs it still takes before it \
            locks (0: locked).

            Example:
              keymgr list --user alice --status all
            """)

    /// A `--status` value: one key status or all of them.
    enum StatusFilter: String, ExpressibleByArgument, CaseIterable {
        case active, locked, revoked, superseded, all

        var statuses: Set<KeyStatus> {
            switch self {
            case .active: [.active]
            case .locked: [.locked]
            case .revoked: [.revoked]
            case .superseded: [.superseded]
            case .all: Set(KeyStatus.allCases)
            }
        }
    }

    @OptionGroup var globals: GlobalOptions

    @OptionGroup var table: TableOptions

    @Option(help: ArgumentHelp("Only this user's keys (user id, the id= of a universalId, or username).", valueName: "name"),
            completion: .custom(StoreCompletion.users))
    var user: String?

    @Option(help: ArgumentHelp("Which keys to show; repeat for several (default: active and locked).", valueName: "status"))
    var status: [StatusFilter] = []

    func run(in context: CommandContext) throws {
        let statuses: Set<KeyStatus> = status.isEmpty ? [.active, .locked] : status.reduce(into: []) { $0.formUnion($1.statuses) }
        let manager = try globals.openManager(in: context, readOnly: true)
        let userId = try manager.resolveUser(user)
        try globals.render(KeyListOutput(manager: manager, userId: userId, statuses: statuses,
                                         empty: user.map { "no matching keys for user \($0)" } ?? "no matching keys",
                                         wide: table.wide), in: context)
    }
}

/// `list`: the keys' objects, or a table; read from the store as they are rendered.
struct KeyListOutput: CommandOutput {
    let manager: KeyManager
    let userId: String?
    let statuses: Set<KeyStatus>
    let empty: String
    let wide: Bool

    /// What `console.answer(json: keys.map { KeyJSON($0) })` prints, built row by row as SQLite steps; written once
    /// whole, so an error half-way prints no half document.
    func json(on console: Console) throws {
        var out = JSONBytes(capacity: 1 << 16)
        out.raw("[")
        var first = true
        try manager.forEachKey(userId: userId, statuses: statuses) { key in
            if !first { out.raw(",") }
            first = false
            out.key(key)
        }
        out.raw("]\n")
        console.output.write(bytes: out.bytes)
    }

    func text(on console: Console) throws {
        let keys = try manager.keys(userId: userId, statuses: statuses)
        // Short kids unless --wide; CREATED only when there is room; ids and names cut before anything else.
        console.table([.whole("KID"), TableColumn("USER ID", .cut(min: 8)), TableColumn("USERNAME"), TableColumn("OWNER", .optional),
                       .whole("AUTH TYPE"), .whole("STATUS"), .whole("SERVER"), TableColumn("CREATED", .optional), .time("LAST USED")],
                      keys.map { [HumanText.kid($0.kid, wide: wide), $0.userId, HumanText.text($0.username), HumanText.text($0.owner),
                                  $0.authType.rawValue, $0.status.rawValue, $0.serverState.rawValue,
                                  HumanText.time($0.createdAt), HumanText.time($0.lastUsedAt)] },
                      empty: empty, wide: wide)
    }
}
