//! `NCCL_TOPO_FILE` XML: reading full dumps and partial PCI skeletons, writing dumps.
//!
//! Layout: `<system version="1">` holds `<cpu>` elements; a CPU holds `<pci>` elements
//! (bridges, nested) and `<nic>` elements (interfaces without PCI); a `<pci>` holds a
//! `<gpu>` (with `<nvlink>` / `<c2c>` children), a `<nic>` (with `<net>` ports) or more
//! `<pci>`. A `<pci>` without `<gpu>`/`<nic>` whose class is 0x0302xx is a GPU, and one of
//! class 0x0207xx / 0x0200xx is a NIC; their details are filled in (or guessed: see
//! [`guess_speed_mbps`]).

use std::collections::HashSet;
use std::fmt::Write as _;
use std::path::Path;

use crate::error::{Result, TopoError};
use crate::model::{
    class, C2cSpec, CpuInfo, Extra, GpuInfo, NetInfo, NetKind, NicInfo, NodeId, NodeKind,
    NvLinkSpec, PciInfo, System,
};
use crate::types::BusId;

struct Ctx<'a> {
    doc: &'a roxmltree::Document<'a>,
    source: &'a str,
}

impl Ctx<'_> {
    fn line(&self, n: roxmltree::Node<'_, '_>) -> u32 {
        self.doc.text_pos_at(n.range().start).row
    }

    fn err(&self, n: roxmltree::Node<'_, '_>, msg: impl Into<String>) -> TopoError {
        TopoError::XmlContent {
            source_name: self.source.to_string(),
            line: self.line(n),
            msg: msg.into(),
        }
    }

    fn req<'n>(&self, n: roxmltree::Node<'n, '_>, attr: &str) -> Result<&'n str> {
        n.attribute(attr).ok_or_else(|| {
            self.err(
                n,
                format!("<{}> lacks the {attr:?} attribute", n.tag_name().name()),
            )
        })
    }

    fn num<T: std::str::FromStr>(
        &self,
        n: roxmltree::Node<'_, '_>,
        attr: &str,
    ) -> Result<Option<T>> {
        match n.attribute(attr) {
            None => Ok(None),
            Some(v) => parse_num::<T>(v).map(Some).ok_or_else(|| {
                self.err(
                    n,
                    format!(
                        "<{}> attribute {attr}={v:?} is not a number",
                        n.tag_name().name()
                    ),
                )
            }),
        }
    }

    fn busid(&self, n: roxmltree::Node<'_, '_>, attr: &str) -> Result<BusId> {
        let v = self.req(n, attr)?;
        v.parse::<BusId>()
            .map_err(|_| self.err(n, format!("{attr}={v:?} is not a PCI bus id")))
    }
}

/// Parses a decimal or `0x` hexadecimal number.
fn parse_num<T: std::str::FromStr>(v: &str) -> Option<T> {
    let t = v.trim();
    if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        let n = u64::from_str_radix(h, 16).ok()?;
        return n.to_string().parse::<T>().ok();
    }
    t.parse::<T>().ok()
}

fn extra(n: roxmltree::Node<'_, '_>, known: &[&str]) -> Extra {
    n.attributes()
        .filter(|a| !known.contains(&a.name()))
        .map(|a| (a.name().to_string(), a.value().to_string()))
        .collect()
}

fn opt(n: roxmltree::Node<'_, '_>, attr: &str) -> Option<String> {
    n.attribute(attr).map(str::to_string)
}

const PCI_ATTRS: &[&str] = &[
    "busid",
    "class",
    "vendor",
    "device",
    "subsystem_vendor",
    "subsystem_device",
    "link_speed",
    "link_width",
];
const CPU_ATTRS: &[&str] = &[
    "numaid", "affinity", "arch", "vendor", "familyid", "modelid",
];
const GPU_ATTRS: &[&str] = &["dev", "sm", "rank", "gdr"];
const NET_ATTRS: &[&str] = &[
    "name", "dev", "speed", "port", "latency", "guid", "maxconn", "gdr", "coll",
];

fn elements<'a, 'i>(n: roxmltree::Node<'a, 'i>) -> impl Iterator<Item = roxmltree::Node<'a, 'i>> {
    n.children().filter(|c| c.is_element())
}

/// Reads a topology file.
pub fn read_file(path: &Path) -> Result<System> {
    let text = std::fs::read_to_string(path).map_err(|source| TopoError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    parse_str(&text, &path.display().to_string())
}

/// Parses topology XML. `source` names the input in error messages.
pub fn parse_str(text: &str, source: &str) -> Result<System> {
    let doc = roxmltree::Document::parse(text).map_err(|e| {
        let pos = e.pos();
        TopoError::XmlSyntax {
            source_name: source.to_string(),
            line: pos.row,
            col: pos.col,
            msg: e.to_string(),
        }
    })?;
    let cx = Ctx { doc: &doc, source };
    let root = doc.root_element();
    if root.tag_name().name() != "system" {
        return Err(cx.err(
            root,
            format!(
                "the root element is <{}>, expected <system>",
                root.tag_name().name()
            ),
        ));
    }
    if let Some(v) = root.attribute("version") {
        if v.trim() != "1" {
            return Err(cx.err(root, format!("unsupported <system> version {v:?}")));
        }
    }
    let mut sys = System::new();
    sys.extra = extra(root, &["version"]);
    let mut numas = HashSet::new();
    // NUMA ids given; `-1` (unknown) gets the lowest id not given.
    let mut given: HashSet<u32> = HashSet::new();
    for c in elements(root).filter(|c| c.tag_name().name() == "cpu") {
        if let Some(Ok(n)) = c.attribute("numaid").map(|v| v.trim().parse::<u32>()) {
            given.insert(n);
        }
    }
    let mut standin = 0u32;
    for c in elements(root) {
        match c.tag_name().name() {
            "cpu" => {
                let raw = cx
                    .num::<i64>(c, "numaid")?
                    .ok_or_else(|| cx.err(c, "<cpu> lacks the \"numaid\" attribute"))?;
                let unknown = raw < 0;
                let numa = if unknown {
                    while given.contains(&standin) || numas.contains(&standin) {
                        standin += 1;
                    }
                    standin
                } else {
                    u32::try_from(raw)
                        .map_err(|_| cx.err(c, format!("numaid={raw} is out of range")))?
                };
                if !numas.insert(numa) {
                    return Err(cx.err(c, format!("a second <cpu> with numaid={numa}")));
                }
                let cpu = CpuInfo {
                    numa,
                    numa_unknown: unknown,
                    affinity: opt(c, "affinity"),
                    arch: opt(c, "arch"),
                    vendor: opt(c, "vendor"),
                    family: cx.num(c, "familyid")?,
                    model: cx.num(c, "modelid")?,
                    extra: extra(c, CPU_ATTRS),
                };
                let id = sys.add_cpu(cpu);
                read_cpu_children(&cx, c, id, &mut sys)?;
            }
            other => {
                tracing::debug!(element = other, "ignoring unknown element under <system>");
            }
        }
    }
    check_unique_busids(&cx, root, &sys)?;
    assign_devs_and_names(&mut sys);
    sys.build_links();
    Ok(sys)
}

fn read_cpu_children(
    cx: &Ctx<'_>,
    el: roxmltree::Node<'_, '_>,
    parent: NodeId,
    sys: &mut System,
) -> Result<()> {
    for c in elements(el) {
        match c.tag_name().name() {
            "pci" => read_pci(cx, c, parent, sys)?,
            "nic" => {
                let nic = sys.add_nic(
                    parent,
                    NicInfo {
                        pci: None,
                        extra: extra(c, &[]),
                    },
                );
                read_nets(cx, c, nic, None, sys)?;
            }
            other => {
                tracing::debug!(element = other, "ignoring unknown element under <cpu>")
            }
        }
    }
    Ok(())
}

fn read_pci_info(cx: &Ctx<'_>, el: roxmltree::Node<'_, '_>) -> Result<PciInfo> {
    Ok(PciInfo {
        busid: cx.busid(el, "busid")?,
        class: opt(el, "class"),
        vendor: opt(el, "vendor"),
        device: opt(el, "device"),
        subsystem_vendor: opt(el, "subsystem_vendor"),
        subsystem_device: opt(el, "subsystem_device"),
        link_speed: opt(el, "link_speed"),
        link_width: cx.num(el, "link_width")?,
        extra: extra(el, PCI_ATTRS),
    })
}

fn read_pci(
    cx: &Ctx<'_>,
    el: roxmltree::Node<'_, '_>,
    parent: NodeId,
    sys: &mut System,
) -> Result<()> {
    let pci = read_pci_info(cx, el)?;
    if let Some(c) = &pci.class {
        if pci.class_code().is_none() {
            return Err(cx.err(el, format!("class={c:?} is not a hexadecimal class code")));
        }
    }
    let gpu_el = elements(el).find(|c| c.tag_name().name() == "gpu");
    let nic_el = elements(el).find(|c| c.tag_name().name() == "nic");
    let code = pci.class_code().unwrap_or(0);
    if gpu_el.is_some() && nic_el.is_some() {
        return Err(cx.err(el, "a <pci> holds both a <gpu> and a <nic>"));
    }
    if gpu_el.is_some() || (nic_el.is_none() && class::is_gpu(code)) {
        let gpu = match gpu_el {
            Some(g) => read_gpu(cx, g, pci)?,
            None => GpuInfo {
                pci,
                dev: u32::MAX,
                sm: None,
                rank: None,
                gdr: None,
                nvlinks: Vec::new(),
                c2c: Vec::new(),
                extra: Vec::new(),
            },
        };
        sys.add_gpu(parent, gpu);
        return Ok(());
    }
    if nic_el.is_some() || class::is_nic(code) {
        let nic_extra = nic_el.map(|n| extra(n, &[])).unwrap_or_default();
        let kind = if code >> 8 == class::NIC_IB >> 8 {
            Some(NetKind::Ib)
        } else {
            None
        };
        let bw_guess = pci.link_bw();
        let id = sys.add_nic(
            parent,
            NicInfo {
                pci: Some(pci),
                extra: nic_extra,
            },
        );
        match nic_el {
            Some(n) => read_nets(cx, n, id, kind, sys)?,
            None => {
                // A PCI-only skeleton: one port, details filled in later.
                sys.add_net(
                    id,
                    NetInfo {
                        name: String::new(),
                        dev: u32::MAX,
                        speed_mbps: guess_speed_mbps(bw_guess),
                        port: if kind == Some(NetKind::Ib) { 1 } else { 0 },
                        kind: kind.unwrap_or(NetKind::Socket),
                        guid: None,
                        latency: None,
                        maxconn: None,
                        gdr: None,
                        coll: None,
                        synthetic: true,
                        extra: Vec::new(),
                    },
                );
            }
        }
        return Ok(());
    }
    let id = sys.add_pci(parent, pci);
    for c in elements(el) {
        match c.tag_name().name() {
            "pci" => read_pci(cx, c, id, sys)?,
            other => {
                tracing::debug!(element = other, "ignoring unknown element under <pci>")
            }
        }
    }
    Ok(())
}

fn read_gpu(cx: &Ctx<'_>, el: roxmltree::Node<'_, '_>, pci: PciInfo) -> Result<GpuInfo> {
    let mut gpu = GpuInfo {
        pci,
        dev: cx.num(el, "dev")?.unwrap_or(u32::MAX),
        sm: cx.num(el, "sm")?,
        rank: cx.num(el, "rank")?,
        gdr: cx.num(el, "gdr")?,
        nvlinks: Vec::new(),
        c2c: Vec::new(),
        extra: extra(el, GPU_ATTRS),
    };
    for c in elements(el) {
        match c.tag_name().name() {
            "nvlink" => gpu.nvlinks.push(NvLinkSpec {
                target: cx.busid(c, "target")?,
                count: cx.num(c, "count")?.unwrap_or(1),
                tclass: opt(c, "tclass"),
                extra: extra(c, &["target", "count", "tclass"]),
            }),
            "c2c" => gpu.c2c.push(C2cSpec {
                count: cx.num(c, "count")?.unwrap_or(1),
                bw: cx.num(c, "bw")?.unwrap_or(0.0),
                extra: extra(c, &["count", "bw"]),
            }),
            other => {
                tracing::debug!(element = other, "ignoring unknown element under <gpu>")
            }
        }
    }
    Ok(gpu)
}

fn read_nets(
    cx: &Ctx<'_>,
    el: roxmltree::Node<'_, '_>,
    nic: NodeId,
    pci_kind: Option<NetKind>,
    sys: &mut System,
) -> Result<()> {
    for c in elements(el) {
        if c.tag_name().name() != "net" {
            tracing::debug!(
                element = c.tag_name().name(),
                "ignoring element under <nic>"
            );
            continue;
        }
        let name = cx.req(c, "name")?.to_string();
        if name.is_empty() {
            return Err(cx.err(c, "<net> has an empty name"));
        }
        let guid = opt(c, "guid");
        let nonzero_guid = guid
            .as_deref()
            .and_then(parse_num::<u64>)
            .is_some_and(|g| g != 0);
        let kind = match c.attribute("transport") {
            Some("ib") => NetKind::Ib,
            Some("socket") => NetKind::Socket,
            _ => pci_kind.unwrap_or(if nonzero_guid {
                NetKind::Ib
            } else {
                NetKind::Socket
            }),
        };
        let speed: Option<u64> = cx.num(c, "speed")?;
        let mut ex = extra(c, NET_ATTRS);
        ex.retain(|(k, _)| k != "transport");
        sys.add_net(
            nic,
            NetInfo {
                name,
                dev: cx.num(c, "dev")?.unwrap_or(u32::MAX),
                speed_mbps: speed
                    .filter(|s| *s > 0)
                    .unwrap_or(crate::types::DEFAULT_NET_SPEED_MBPS),
                port: cx
                    .num(c, "port")?
                    .unwrap_or(if kind == NetKind::Ib { 1 } else { 0 }),
                kind,
                guid,
                latency: opt(c, "latency"),
                maxconn: opt(c, "maxconn"),
                gdr: opt(c, "gdr"),
                coll: opt(c, "coll"),
                synthetic: false,
                extra: ex,
            },
        );
    }
    Ok(())
}

fn check_unique_busids(cx: &Ctx<'_>, root: roxmltree::Node<'_, '_>, sys: &System) -> Result<()> {
    let mut seen = HashSet::new();
    for n in &sys.nodes {
        let b = match &n.kind {
            NodeKind::Pci(p) => p.busid,
            NodeKind::Gpu(g) => g.pci.busid,
            NodeKind::Nic(nic) => match &nic.pci {
                Some(p) => p.busid,
                None => continue,
            },
            _ => continue,
        };
        if !seen.insert(b) {
            // Find the element for a line number.
            let el = root
                .descendants()
                .filter(|d| d.tag_name().name() == "pci")
                .filter(|d| d.attribute("busid").and_then(|v| v.parse::<BusId>().ok()) == Some(b))
                .nth(1)
                .unwrap_or(root);
            return Err(cx.err(el, format!("bus id {b} appears twice")));
        }
    }
    Ok(())
}

/// Guesses a port speed from the NIC's PCIe bandwidth (GB/s), rounded to a standard rate:
/// Gen3 x16 -> 100 Gb/s, Gen4 x16 -> 200 Gb/s, Gen5 x16 -> 400 Gb/s.
pub fn guess_speed_mbps(pci_bw: f64) -> u64 {
    const RATES: [u64; 8] = [10, 25, 40, 50, 100, 200, 400, 800];
    let gbps = pci_bw * 8.0;
    let mut best = RATES[0];
    for r in RATES {
        if (r as f64 - gbps).abs() < (best as f64 - gbps).abs() {
            best = r;
        }
    }
    best * 1000
}

/// Gives GPUs and ports without a `dev` the next free indexes (in bus-id order) and names
/// synthetic ports (`mlx5_N` for InfiniBand-class NICs, `ethN` otherwise).
pub fn assign_devs_and_names(sys: &mut System) {
    // GPUs.
    let mut used: HashSet<u32> = HashSet::new();
    let mut missing: Vec<(BusId, NodeId)> = Vec::new();
    for (i, n) in sys.nodes.iter().enumerate() {
        if let NodeKind::Gpu(g) = &n.kind {
            if g.dev == u32::MAX || !used.insert(g.dev) {
                missing.push((g.pci.busid, i));
            }
        }
    }
    missing.sort();
    let mut next = 0u32;
    for (_, i) in missing {
        while used.contains(&next) {
            next += 1;
        }
        if let Some(NodeKind::Gpu(g)) = sys.nodes.get_mut(i).map(|n| &mut n.kind) {
            g.dev = next;
        }
        used.insert(next);
    }
    // Ports.
    let mut used: HashSet<u32> = HashSet::new();
    let mut names: HashSet<String> = HashSet::new();
    let mut missing: Vec<(NetKind, Option<BusId>, u32, NodeId)> = Vec::new();
    for i in 0..sys.nodes.len() {
        if let NodeKind::Net(n) = &sys.nodes[i].kind {
            names.insert(n.name.clone());
            if n.dev == u32::MAX || !used.insert(n.dev) {
                missing.push((n.kind, sys.busid(i), n.port, i));
            }
        }
    }
    // Verbs ports before sockets; PCI ports by bus id; ports without PCI last.
    missing.sort_by_key(|(k, b, p, i)| (*k, b.is_none(), *b, *p, *i));
    let mut next = 0u32;
    for (_, _, _, i) in missing {
        while used.contains(&next) {
            next += 1;
        }
        if let Some(NodeKind::Net(n)) = sys.nodes.get_mut(i).map(|n| &mut n.kind) {
            n.dev = next;
        }
        used.insert(next);
    }
    let mut synth: Vec<(u32, NodeId)> = sys
        .nodes
        .iter()
        .enumerate()
        .filter_map(|(i, n)| match &n.kind {
            NodeKind::Net(net) if net.name.is_empty() => Some((net.dev, i)),
            _ => None,
        })
        .collect();
    synth.sort();
    let (mut ib, mut eth) = (0u32, 0u32);
    for (_, i) in synth {
        let Some(NodeKind::Net(n)) = sys.nodes.get_mut(i).map(|n| &mut n.kind) else {
            continue;
        };
        let (prefix, counter) = match n.kind {
            NetKind::Ib => ("mlx5_", &mut ib),
            NetKind::Socket => ("eth", &mut eth),
        };
        loop {
            let cand = format!("{prefix}{}", *counter);
            *counter += 1;
            if names.insert(cand.clone()) {
                n.name = cand;
                break;
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Writing.

fn esc(v: &str) -> String {
    let mut s = String::with_capacity(v.len());
    for ch in v.chars() {
        match ch {
            '&' => s.push_str("&amp;"),
            '<' => s.push_str("&lt;"),
            '>' => s.push_str("&gt;"),
            '"' => s.push_str("&quot;"),
            '\'' => s.push_str("&apos;"),
            c => s.push(c),
        }
    }
    s
}

struct Tag {
    name: &'static str,
    attrs: Vec<(String, String)>,
}

impl Tag {
    fn new(name: &'static str) -> Self {
        Tag {
            name,
            attrs: Vec::new(),
        }
    }
    fn a(mut self, k: &str, v: impl ToString) -> Self {
        self.attrs.push((k.to_string(), v.to_string()));
        self
    }
    fn o(self, k: &str, v: Option<impl ToString>) -> Self {
        match v {
            Some(v) => self.a(k, v),
            None => self,
        }
    }
    fn x(mut self, extra: &Extra) -> Self {
        self.attrs.extend(extra.iter().cloned());
        self
    }
    fn head(&self, out: &mut String, depth: usize) {
        for _ in 0..depth {
            out.push_str("  ");
        }
        out.push('<');
        out.push_str(self.name);
        for (k, v) in &self.attrs {
            let _ = write!(out, " {k}=\"{}\"", esc(v));
        }
    }
    fn leaf(&self, out: &mut String, depth: usize) {
        self.head(out, depth);
        out.push_str("/>\n");
    }
    fn open(&self, out: &mut String, depth: usize) {
        self.head(out, depth);
        out.push_str(">\n");
    }
    fn close(&self, out: &mut String, depth: usize) {
        for _ in 0..depth {
            out.push_str("  ");
        }
        let _ = writeln!(out, "</{}>", self.name);
    }
}

fn pci_tag(p: &PciInfo) -> Tag {
    Tag::new("pci")
        .a("busid", p.busid)
        .o("class", p.class.as_ref())
        .o("vendor", p.vendor.as_ref())
        .o("device", p.device.as_ref())
        .o("subsystem_vendor", p.subsystem_vendor.as_ref())
        .o("subsystem_device", p.subsystem_device.as_ref())
        .o("link_speed", p.link_speed.as_ref())
        .o("link_width", p.link_width)
        .x(&p.extra)
}

fn net_tag(n: &NetInfo) -> Tag {
    Tag::new("net")
        .a("name", &n.name)
        .a("dev", n.dev)
        .a("speed", n.speed_mbps)
        .a("port", n.port)
        .o("latency", n.latency.as_ref())
        .o("guid", n.guid.as_ref())
        .o("maxconn", n.maxconn.as_ref())
        .o("gdr", n.gdr.as_ref())
        .o("coll", n.coll.as_ref())
        .a("transport", n.kind.as_str())
        .x(&n.extra)
}

fn write_nic(sys: &System, id: NodeId, nic: &NicInfo, out: &mut String, depth: usize) {
    let t = Tag::new("nic").x(&nic.extra);
    let nets: Vec<NodeId> = sys
        .nodes
        .get(id)
        .map(|n| n.children.clone())
        .unwrap_or_default();
    if nets.is_empty() {
        t.leaf(out, depth);
        return;
    }
    t.open(out, depth);
    for c in nets {
        if let Some(net) = sys.net(c) {
            net_tag(net).leaf(out, depth + 1);
        }
    }
    t.close(out, depth);
}

/// `t` as a leaf, or opened around its children's elements.
fn write_with_children(sys: &System, t: &Tag, children: &[NodeId], out: &mut String, depth: usize) {
    if children.is_empty() {
        t.leaf(out, depth);
    } else {
        t.open(out, depth);
        for &ch in children {
            write_node(sys, ch, out, depth + 1);
        }
        t.close(out, depth);
    }
}

fn write_node(sys: &System, id: NodeId, out: &mut String, depth: usize) {
    let Some(node) = sys.nodes.get(id) else {
        return;
    };
    match &node.kind {
        NodeKind::Cpu(c) => {
            let numaid = if c.numa_unknown {
                "-1".to_string()
            } else {
                c.numa.to_string()
            };
            let t = Tag::new("cpu")
                .a("numaid", numaid)
                .o("affinity", c.affinity.as_ref())
                .o("arch", c.arch.as_ref())
                .o("vendor", c.vendor.as_ref())
                .o("familyid", c.family)
                .o("modelid", c.model)
                .x(&c.extra);
            write_with_children(sys, &t, &node.children, out, depth);
        }
        NodeKind::Pci(p) => {
            let t = pci_tag(p);
            write_with_children(sys, &t, &node.children, out, depth);
        }
        NodeKind::Gpu(g) => {
            let t = pci_tag(&g.pci);
            t.open(out, depth);
            let gt = Tag::new("gpu")
                .a("dev", g.dev)
                .o("sm", g.sm)
                .o("rank", g.rank)
                .o("gdr", g.gdr)
                .x(&g.extra);
            if g.nvlinks.is_empty() && g.c2c.is_empty() {
                gt.leaf(out, depth + 1);
            } else {
                gt.open(out, depth + 1);
                for nv in &g.nvlinks {
                    Tag::new("nvlink")
                        .a("target", nv.target)
                        .a("count", nv.count)
                        .o("tclass", nv.tclass.as_ref())
                        .x(&nv.extra)
                        .leaf(out, depth + 2);
                }
                for c in &g.c2c {
                    Tag::new("c2c")
                        .a("count", c.count)
                        .a("bw", c.bw)
                        .x(&c.extra)
                        .leaf(out, depth + 2);
                }
                gt.close(out, depth + 1);
            }
            t.close(out, depth);
        }
        NodeKind::Nic(nic) => match &nic.pci {
            Some(p) => {
                let t = pci_tag(p);
                t.open(out, depth);
                write_nic(sys, id, nic, out, depth + 1);
                t.close(out, depth);
            }
            None => write_nic(sys, id, nic, out, depth),
        },
        NodeKind::Net(_) | NodeKind::NvSwitch => {}
    }
}

/// Writes the system as topology XML (what `NCCL_TOPO_DUMP_FILE` receives).
pub fn to_string(sys: &System) -> String {
    let mut out = String::new();
    let root = Tag::new("system").a("version", 1).x(&sys.extra);
    root.open(&mut out, 0);
    for cpu in sys.cpus() {
        write_node(sys, cpu, &mut out, 1);
    }
    root.close(&mut out, 0);
    out
}

/// Writes the XML to a file.
pub fn write_file(sys: &System, path: &Path) -> Result<()> {
    std::fs::write(path, to_string(sys)).map_err(|source| TopoError::Io {
        path: path.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMALL: &str = r#"<system version="1">
  <cpu numaid="0" arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="85">
    <pci busid="0000:01:00.0" class="0x060400" link_speed="16 GT/s" link_width="16">
      <pci busid="0000:02:00.0" class="0x030200" link_speed="16 GT/s" link_width="16"/>
      <pci busid="0000:03:00.0" class="0x020700" link_speed="16 GT/s" link_width="16"/>
    </pci>
    <nic>
      <net name="lo" dev="5" speed="10000" port="0"/>
    </nic>
  </cpu>
</system>
"#;

    #[test]
    fn skeleton_devices_are_recognised() {
        let s = parse_str(SMALL, "t").unwrap();
        assert_eq!(s.gpus().len(), 1);
        let nets = s.nets();
        assert_eq!(nets.len(), 2);
        let n0 = s.net(nets[0]).unwrap();
        assert_eq!(
            (n0.name.as_str(), n0.dev, n0.kind),
            ("mlx5_0", 0, NetKind::Ib)
        );
        assert_eq!(n0.speed_mbps, 200_000);
        let n1 = s.net(nets[1]).unwrap();
        assert_eq!((n1.name.as_str(), n1.dev), ("lo", 5));
    }

    #[test]
    fn round_trip_is_stable() {
        let s = parse_str(SMALL, "t").unwrap();
        let a = to_string(&s);
        let b = to_string(&parse_str(&a, "a").unwrap());
        assert_eq!(a, b);
    }

    #[test]
    fn syntax_errors_name_the_line() {
        let bad = "<system version=\"1\">\n  <cpu numaid=\"0\">\n    <pci busid=\"0000:01:00.0\">\n  </cpu>\n</system>\n";
        let e = parse_str(bad, "bad.xml").unwrap_err();
        let msg = e.to_string();
        assert!(msg.starts_with("bad.xml:4:"), "{msg}");
    }

    #[test]
    fn content_errors_name_the_line() {
        let bad = "<system version=\"1\">\n  <cpu numaid=\"0\">\n    <pci busid=\"nope\"/>\n  </cpu>\n</system>\n";
        let msg = parse_str(bad, "bad.xml").unwrap_err().to_string();
        assert!(msg.starts_with("bad.xml:3:"), "{msg}");
        assert!(msg.contains("nope"), "{msg}");
        let bad = "<system version=\"1\">\n  <cpu>\n  </cpu>\n</system>\n";
        let msg = parse_str(bad, "bad.xml").unwrap_err().to_string();
        assert!(
            msg.starts_with("bad.xml:2:") && msg.contains("numaid"),
            "{msg}"
        );
        let bad = "<topology/>";
        assert!(parse_str(bad, "x").is_err());
        let bad = "<system><cpu numaid=\"0\"><pci busid=\"0000:01:00.0\" link_width=\"x\"/></cpu></system>";
        assert!(parse_str(bad, "x")
            .unwrap_err()
            .to_string()
            .contains("link_width"));
        let dup = "<system>\n<cpu numaid=\"0\">\n<pci busid=\"0000:01:00.0\"/>\n<pci busid=\"0000:01:00.0\"/>\n</cpu></system>";
        let msg = parse_str(dup, "d").unwrap_err().to_string();
        assert!(msg.starts_with("d:4:"), "{msg}");
    }

    #[test]
    fn garbage_never_panics() {
        for s in [
            "",
            "<",
            "<system",
            "<system></cpu>",
            "\u{0}",
            "<system><cpu numaid='-1'/></system>",
        ] {
            let _ = parse_str(s, "g");
        }
    }
}
