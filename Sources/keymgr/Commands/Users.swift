import ArgumentParser
import KeyManager

/// `keymgr users`: who has keys on this device.
struct Users: KeymgrCommand {
    static let configuration = CommandConfiguration(
        commandName: "users",
        abstract: "List the users known on this device.",
        discussion: """
            KEYS counts each user's active keys; OWNER is the login of the person linked to the identity user. \
            With --json: [{"userId", "username", "owner", "keys", "createdAt"}].

            Example:
              keymgr users
            """)

    @OptionGroup var globals: GlobalOptions

    @OptionGroup var table: TableOptions

    func run(in context: CommandContext) throws {
        let users = try globals.openManager(in: context, readOnly: true).users()
        try globals.render(UsersOutput(users: users, wide: table.wide), in: context)
    }
}

/// `users`: the users' objects, or a table.
struct UsersOutput: DocumentOutput {
    let users: [UserSummary]
    let wide: Bool

    var document: [UserJSON] { users.map(UserJSON.init) }

    func text(on console: Console) {
        console.table([TableColumn("USER ID", .cut(min: 8)), TableColumn("USERNAME"), TableColumn("OWNER"), .whole("KEYS"),
                       .time("CREATED")],
                      users.map { [$0.userId, HumanText.text($0.username), HumanText.text($0.owner), String($0.activeKeys), HumanText.time($0.createdAt)] },
                      empty: "no users on this device", wide: wide)
    }
}
