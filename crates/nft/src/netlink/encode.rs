//! Encoding a transaction into one batch: begin, a message (or several, for long element
//! lists) per operation, end.

use super::elements::{self, ElemRef};
use super::sys::{self, ChainWire, Hdr, RuleWire, Scratch, SetWire};
use super::{EncodedBatch, FIRST_SEQ, flowtables, framing, udata};
use crate::kernel_expr::LowRule;
use crate::lower::lower;
use crate::ruleset::{Blob, DataSpec, Elem, ElemData, Flowtable, SetDecl, Verdict, concat_len, concat_type_id};
use crate::transaction::{Op, Transaction};
use verdict_netlink::consts::*;

/// Set flags (NFT_SET_*).
const SET_ANONYMOUS: u32 = libc::NFT_SET_ANONYMOUS as u32;
const SET_CONSTANT: u32 = libc::NFT_SET_CONSTANT as u32;
const SET_MAP: u32 = libc::NFT_SET_MAP as u32;
const SET_TIMEOUT: u32 = libc::NFT_SET_TIMEOUT as u32;
const SET_EVAL: u32 = libc::NFT_SET_EVAL as u32;
/// NFT_DATA_VERDICT as a set data type.
const DATA_VERDICT: u32 = libc::NFT_DATA_VERDICT;
/// Element bytes per NEWSETELEM message: the element list is one attribute, whose length is a
/// u16.
const ELEMENT_BUDGET: usize = 60 * 1024;

fn set_wire(decl: &SetDecl, id: u32) -> SetWire {
    let key_types = decl.key_types();
    let mut flags = 0;
    let (mut data_type, mut data_len) = (None, 0);
    match &decl.data {
        None => {}
        Some(DataSpec::Verdict) => {
            flags |= SET_MAP;
            data_type = Some(DATA_VERDICT);
        }
        Some(d @ DataSpec::Typeof(_)) => {
            flags |= SET_MAP;
            let types = d.datatypes();
            data_type = Some(concat_type_id(&types));
            data_len = concat_len(&types) as u32;
        }
    }
    if decl.timeout.is_some() {
        flags |= SET_TIMEOUT | SET_EVAL;
    }
    SetWire {
        name: decl.name.clone(),
        flags,
        key_type: concat_type_id(&key_types),
        key_len: concat_len(&key_types) as u32,
        data_type,
        data_len,
        id: Some(id),
        size: decl.size,
        timeout_ms: decl.timeout.map(|t| u64::from(t) * 1000),
        udata: udata::set_udata(decl),
        counter: decl.counter,
    }
}

fn verdict_code(v: &Verdict) -> (i32, Option<&str>) {
    use crate::kernel_consts as k;
    match v {
        Verdict::Accept => (k::NF_ACCEPT, None),
        Verdict::Drop => (k::NF_DROP, None),
        Verdict::Return => (k::NFT_RETURN, None),
        Verdict::Jump(c) => (k::NFT_JUMP, Some(c)),
        Verdict::Goto(c) => (k::NFT_GOTO, Some(c)),
    }
}

fn elem_ref<'a>(key: &'a Blob, elem: Option<&'a Elem>) -> ElemRef<'a> {
    let mut r = ElemRef { key: key.as_slice(), verdict: None, data: None, comment: None };
    if let Some(e) = elem {
        match &e.data {
            None => {}
            Some(ElemData::Verdict(v)) => r.verdict = Some(verdict_code(v)),
            Some(ElemData::Value(b)) => r.data = Some(b.as_slice()),
        }
        r.comment = e.comment.as_deref();
    }
    r
}

struct Encoder<'a> {
    scratch: &'a mut Scratch,
    table: String,
    out: EncodedBatch,
    next_set_id: u32,
    op: usize,
}

impl Encoder<'_> {
    /// The header of the next message (which belongs to the current operation).
    fn hdr(&mut self, msg_type: u16, flags: u16) -> Hdr {
        self.out.op_of_message.push(self.op);
        Hdr { msg_type, flags, seq: FIRST_SEQ + self.out.op_of_message.len() as u32 - 1 }
    }

    fn elements(
        &mut self,
        msg_type: u16,
        set: &str,
        set_id: Option<u32>,
        elems: impl Iterator<Item = (Blob, Option<Elem>)>,
    ) {
        let flags = if msg_type == NFT_MSG_NEWSETELEM { NLM_F_CREATE } else { 0 };
        let mut chunk: Vec<(Blob, Option<Elem>)> = Vec::new();
        let mut size = 0;
        for (key, elem) in elems {
            let n = elem_ref(&key, elem.as_ref()).size();
            if size + n > ELEMENT_BUDGET && !chunk.is_empty() {
                self.put_elements(msg_type, flags, set, set_id, &chunk);
                chunk.clear();
                size = 0;
            }
            size += n;
            chunk.push((key, elem));
        }
        if !chunk.is_empty() {
            self.put_elements(msg_type, flags, set, set_id, &chunk);
        }
    }

    /// One message of elements.
    fn put_elements(
        &mut self,
        msg_type: u16,
        flags: u16,
        set: &str,
        set_id: Option<u32>,
        elems: &[(Blob, Option<Elem>)],
    ) {
        let refs: Vec<ElemRef<'_>> = elems.iter().map(|(k, e)| elem_ref(k, e.as_ref())).collect();
        let h = self.hdr(msg_type, flags);
        elements::put_elements(&mut self.out.body, h, &self.table, set, set_id, &refs);
    }

    fn rule(&mut self, chain: &str, low: &LowRule) {
        let mut anon_ids = Vec::new();
        for anon in &low.anon_sets {
            let id = self.next_set_id;
            self.next_set_id += 1;
            anon_ids.push(id);
            let mut flags = SET_ANONYMOUS | SET_CONSTANT;
            if anon.verdict_map {
                flags |= SET_MAP;
            }
            let w = SetWire {
                name: "__set%d".into(),
                flags,
                key_type: anon.key_type.id(),
                key_len: anon.key_type.bytes() as u32,
                data_type: anon.verdict_map.then_some(DATA_VERDICT),
                data_len: 0,
                id: Some(id),
                size: Some(anon.elements.len() as u32),
                timeout_ms: None,
                udata: udata::anon_set_udata(anon.key_selector, anon.verdict_map),
                counter: false,
            };
            let h = self.hdr(NFT_MSG_NEWSET, NLM_F_CREATE);
            sys::put_set(self.scratch, &mut self.out.body, h, &self.table, &w);
            let elems = anon
                .elements
                .iter()
                .map(|(key, verdict)| (Blob::new(key), verdict.clone().map(|v| Elem::verdict(v, None))));
            self.elements(NFT_MSG_NEWSETELEM, "__set%d", Some(id), elems);
        }
        let w = RuleWire {
            chain: chain.to_string(),
            exprs: low.exprs.clone(),
            udata: low.comment.as_deref().map(udata::comment_udata),
            handle: 0,
        };
        let h = self.hdr(NFT_MSG_NEWRULE, NLM_F_CREATE | NLM_F_APPEND);
        sys::put_rule(self.scratch, &mut self.out.body, h, &self.table, &w, &anon_ids);
    }
}

pub(super) fn encode(scratch: &mut Scratch, tx: &Transaction) -> EncodedBatch {
    // Elements dominate large batches; size the buffer once instead of growing it by copies.
    let estimate: usize = tx
        .ops
        .iter()
        .map(|op| match op {
            Op::AddElements { elements, .. } => elements.len() * 96,
            Op::DeleteElements { keys, .. } => keys.len() * 48,
            _ => 512,
        })
        .sum();
    let mut e = Encoder {
        scratch,
        table: tx.table.clone(),
        out: EncodedBatch { body: Vec::with_capacity(estimate), op_of_message: Vec::new(), descriptions: Vec::new() },
        next_set_id: 1,
        op: 0,
    };
    // The batch begins with BEGIN (its generation id is filled in when sending) and ends
    // with END, so the body is sent as it is, without copying it.
    framing::put_begin(&mut e.out.body, FIRST_SEQ - 1, Some(0));
    for (i, op) in tx.ops.iter().enumerate() {
        e.op = i;
        e.out.descriptions.push(op.describe());
        let table = e.table.clone();
        match op {
            Op::AddTable(t) => {
                let udata = t.comment.as_deref().map(udata::comment_udata);
                let h = e.hdr(NFT_MSG_NEWTABLE, NLM_F_CREATE);
                sys::put_table(e.scratch, &mut e.out.body, h, &table, udata.as_deref());
            }
            Op::DeleteTable => {
                let h = e.hdr(NFT_MSG_DELTABLE, 0);
                sys::put_table(e.scratch, &mut e.out.body, h, &table, None);
            }
            Op::AddChain { name, base } => {
                let w = ChainWire {
                    name: name.clone(),
                    hook: base.map(|b| (b.hook.number(), b.priority, b.kind.name().to_string())),
                    policy: None,
                };
                let h = e.hdr(NFT_MSG_NEWCHAIN, NLM_F_CREATE);
                sys::put_chain(e.scratch, &mut e.out.body, h, &table, &w);
            }
            Op::FlushChain(name) => {
                let h = e.hdr(NFT_MSG_DELRULE, 0);
                let w = RuleWire { chain: name.clone(), ..RuleWire::default() };
                sys::put_rule(e.scratch, &mut e.out.body, h, &table, &w, &[]);
            }
            Op::DeleteChain(name) => {
                let h = e.hdr(NFT_MSG_DELCHAIN, 0);
                let w = ChainWire { name: name.clone(), ..ChainWire::default() };
                sys::put_chain(e.scratch, &mut e.out.body, h, &table, &w);
            }
            Op::AddRule { chain, rule } => {
                let low = lower(rule);
                e.rule(chain, &low);
            }
            Op::AddSet(decl) => {
                let id = e.next_set_id;
                e.next_set_id += 1;
                let w = set_wire(decl, id);
                let h = e.hdr(NFT_MSG_NEWSET, NLM_F_CREATE);
                sys::put_set(e.scratch, &mut e.out.body, h, &table, &w);
            }
            Op::DeleteSet(name) => {
                let h = e.hdr(NFT_MSG_DELSET, 0);
                let w = SetWire { name: name.clone(), ..SetWire::default() };
                sys::put_set(e.scratch, &mut e.out.body, h, &table, &w);
            }
            Op::AddElements { set, elements, .. } => {
                e.elements(NFT_MSG_NEWSETELEM, set, None, elements.iter().map(|(k, v)| (k, Some(v))));
            }
            Op::DeleteElements { set, keys, .. } => {
                e.elements(NFT_MSG_DELSETELEM, set, None, keys.iter().map(|k| (*k, None)));
            }
            Op::AddFlowtable(ft) => {
                let h = e.hdr(NFT_MSG_NEWFLOWTABLE, NLM_F_CREATE);
                let devices: Vec<String> = ft.devices.iter().cloned().collect();
                flowtables::put_flowtable(&mut e.out.body, h, &table, ft, Some(&devices));
            }
            Op::DeleteFlowtableDevices { name, devices } => {
                let h = e.hdr(NFT_MSG_DELFLOWTABLE, 0);
                flowtables::put_flowtable(&mut e.out.body, h, &table, &Flowtable::new(name.clone()), Some(devices));
            }
            Op::DeleteFlowtable(name) => {
                let h = e.hdr(NFT_MSG_DELFLOWTABLE, 0);
                flowtables::put_flowtable(&mut e.out.body, h, &table, &Flowtable::new(name.clone()), None);
            }
        }
    }
    let end_seq = FIRST_SEQ + e.out.op_of_message.len() as u32;
    framing::put_end(&mut e.out.body, end_seq);
    e.out
}
