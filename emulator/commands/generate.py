"""`emulate generate`: Write a synthetic Chakra trace set (moe_mix, allreduce, alltoall, ...)."""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from typing import Any

from emulator.errors import EXIT_OK, InputError

HELP = "Write a synthetic Chakra trace set (moe_mix, allreduce, ...)."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from emulator.config import param_info
    from emulator.workloads.params import GENERATORS_PARAMS

    kinds = parser.add_subparsers(dest="kind", metavar="KIND", title="kinds")
    kinds.required = True
    for kind, cls in GENERATORS_PARAMS.items():
        sub = kinds.add_parser(kind, help=(cls.__doc__ or kind).split("\n")[0])
        sub.add_argument(
            "--out",
            required=True,
            metavar="PREFIX",
            help="writes PREFIX.<rank>.et and PREFIX.comm_groups.json",
        )
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            info = param_info(f)
            doc = info.doc if info else ""
            if info and info.unit:
                doc += f" [{info.unit}]"
            flag = "--" + f.name.replace("_", "-")
            kind_type = _scalar_type(hints[f.name])
            if kind_type is bool:
                sub.add_argument(
                    flag, dest=f.name, action=argparse.BooleanOptionalAction, default=None, help=doc
                )
            else:
                sub.add_argument(
                    flag,
                    dest=f.name,
                    type=kind_type,
                    default=None,
                    metavar=f.name.upper(),
                    help=f"{doc} (default {f.default})",
                )


def _scalar_type(hint: Any) -> Any:
    """int | None -> int; plain types as they are."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        inner = [a for a in typing.get_args(hint) if a is not type(None)]
        return inner[0]
    return hint


def main(args: argparse.Namespace) -> int:
    from emulator.workloads.params import GENERATORS_PARAMS
    from emulator.workloads.registry import write_workload

    cls = GENERATORS_PARAMS[args.kind]
    values = {
        f.name: getattr(args, f.name)
        for f in dataclasses.fields(cls)
        if getattr(args, f.name, None) is not None
    }
    _check_ranges(cls, values)
    try:
        params = cls(**values)
    except ValueError as exc:
        raise InputError(f"{args.kind}: {exc}") from None
    paths = write_workload(params, args.out)
    ranks = [p for p in paths if p.name.endswith(".et")]
    print(f"wrote {len(ranks)} rank files {args.out}.0.et .. {args.out}.{len(ranks) - 1}.et")
    for path in paths[len(ranks) :]:
        print(f"wrote {path}")
    return EXIT_OK


def _check_ranges(cls: type, values: dict[str, Any]) -> None:
    from emulator.config import check_range, param_info

    for f in dataclasses.fields(cls):
        info = param_info(f)
        value = values.get(f.name)
        if info is None or value is None or isinstance(value, bool):
            continue
        problem = check_range(info, value)
        if problem:
            raise InputError(f"--{f.name.replace('_', '-')} {value}: {problem}")
