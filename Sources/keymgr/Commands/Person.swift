import ArgumentParser
import Foundation
import KeyManager

/// `keymgr person`: which person (OS account) owns which identity users (docs/agent-policy.md "People and identities").
struct Person: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "person",
        abstract: "Link people (OS accounts) to the identity users they own.",
        discussion: """
            Through the agent, `for = "self"` in the policy means the identity users linked to the caller: never a \
            user id or username that happens to equal the login name. A person links an identity user to \
            themself by binding one nobody had; an administrator links any with `person link`. A link is never moved: \
            unlink it first.

            Example:
              keymgr person link alice id=alice,ou=user,ou=am-config
              keymgr person list
            """,
        subcommands: [Link.self, Unlink.self, ListLinks.self])

    @OptionGroup var globals: GlobalOptions

    /// `keymgr person link LOGIN USER_ID`.
    struct Link: KeymgrCommand {
        static let configuration = CommandConfiguration(
            commandName: "link",
            abstract: "Link an identity user to a person (an OS login).",
            discussion: """
                The identity user must exist on this device and be nobody else's (unlink it from its owner first). \
                Audited as person.linked. With --json: the link object.

                Example:
                  keymgr person link alice id=alice,ou=user,ou=am-config
                """)

        @OptionGroup var globals: GlobalOptions

        @Argument(help: ArgumentHelp("The person's login name.", valueName: "login"))
        var login: String

        @Argument(help: ArgumentHelp("The identity user's full user id.", valueName: "user-id"))
        var userId: String

        func run(in context: CommandContext) throws {
            let link = try globals.openManager(in: context).linkPerson(login: login, userId: userId)
            try globals.render(PersonLinksOutput(links: [link], verb: "linked"), in: context)
        }
    }

    /// `keymgr person unlink LOGIN USER_ID`.
    struct Unlink: KeymgrCommand {
        static let configuration = CommandConfiguration(
            commandName: "unlink",
            abstract: "Break the link of an identity user to a person.",
            discussion: """
                Audited as person.unlinked. With --json: {"login", "userId"}. The policy's [self] table is changed \
                only by editing the policy.

                Example:
                  keymgr person unlink alice id=alice,ou=user,ou=am-config
                """)

        @OptionGroup var globals: GlobalOptions

        @Argument(help: ArgumentHelp("The person's login name.", valueName: "login"))
        var login: String

        @Argument(help: ArgumentHelp("The identity user's full user id.", valueName: "user-id"))
        var userId: String

        func run(in context: CommandContext) throws {
            try globals.openManager(in: context).unlinkPerson(login: login, userId: userId)
            try globals.render(PersonUnlinkedOutput(login: login, userId: userId), in: context)
        }
    }

    /// `keymgr person list`.
    struct ListLinks: KeymgrCommand {
        static let configuration = CommandConfiguration(
            commandName: "list",
            abstract: "List the links of people to identity users.",
            discussion: """
                With --json: [{"login", "uid", "userId", "username", "linkedBy", "createdAt"}]; linkedBy is \
                administrator, bind, migrated, or policy (the agent's [self] table, createdAt null).

                Example:
                  keymgr person list --json
                """)

        @OptionGroup var globals: GlobalOptions

        @OptionGroup var table: TableOptions

        func run(in context: CommandContext) throws {
            let links = try globals.openManager(in: context, readOnly: true).personLinks()
            try globals.render(PersonLinksOutput(links: links, verb: nil, wide: table.wide), in: context)
        }
    }
}

/// `{"login","uid","userId","username","linkedBy","createdAt"}`.
struct PersonLinkJSON: Encodable {
    let login: String
    let uid: UInt32
    let userId: String
    @Nullable var username: String?
    let linkedBy: String
    @Nullable var createdAt: Date?

    init(_ link: PersonLink) {
        login = link.login
        uid = link.uid
        userId = link.userId
        username = link.username
        linkedBy = link.linkedBy
        createdAt = link.createdAt
    }
}

/// `person unlink`: `{"login","userId"}`, or a line.
struct PersonUnlinkedOutput: DocumentOutput {
    let login: String
    let userId: String

    var document: [String: String] { ["login": login, "userId": userId] }

    func text(on console: Console) { console.confirm("unlinked \(userId) from \(login)") }
}

/// `person`: the links' objects, or a table (`list`) or a line each (`link`).
struct PersonLinksOutput: DocumentOutput {
    let links: [PersonLink]
    /// `linked` for `person link`; nil for the listing.
    let verb: String?
    var wide = false

    var document: [PersonLinkJSON] { links.map(PersonLinkJSON.init) }

    func text(on console: Console) {
        if let verb {
            for link in links { console.confirm("\(verb) \(link.userId) to \(link.login) (uid \(link.uid))") }
            return
        }
        console.table([TableColumn("LOGIN"), .whole("UID"), TableColumn("USER ID", .cut(min: 8)), TableColumn("USERNAME"),
                       .whole("LINKED BY"), .time("CREATED")],
                      links.map { [$0.login, String($0.uid), $0.userId, HumanText.text($0.username), $0.linkedBy,
                                   HumanText.time($0.createdAt)] },
                      empty: "no person is linked to an identity user", wide: wide)
    }
}
