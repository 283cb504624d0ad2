//! The shape guarantee of the typed reader (`read_typed`): a struct or map
//! of the report where the JSON has an array is an error naming the field.
//! serde reads a struct from an array too (its fields in order: `"loss":
//! [1]` would be one ring-buffer drop); the report never writes one.
//!
//! Two ways, one rule: [`strict`] wraps the deserializer the report is read
//! from (a file, streamed: no tree is built), and refuses a sequence
//! wherever a struct or map is asked for; [`check`] walks a typed value
//! alongside the JSON value it was read from, for what serde reads from
//! buffered content that no wrapper reaches (a `#[serde(flatten)]`ed
//! struct: [`checked_seq`]).
use std::{cell::RefCell, collections::BTreeSet, fmt, marker::PhantomData};

use serde::{
    Deserialize, Deserializer, Serialize,
    de::{self, DeserializeOwned, DeserializeSeed, EnumAccess, MapAccess, SeqAccess, VariantAccess, Visitor},
    ser,
};
use serde_json::Value;

type Error = serde_json::Error;

fn fail(at: &str, v: &Value) -> Error {
    ser::Error::custom(format!(
        "`{at}`: is {}, not an object",
        crate::error::cut_middle(&v.to_string(), 60)
    ))
}

/// Checks that wherever `typed` is a struct or map, `read` is not an array.
pub fn check<T: Serialize>(typed: &T, read: &Value) -> Result<(), String> {
    typed
        .serialize(Walk {
            read: Some(read),
            at: String::new(),
        })
        .map_err(|e| e.to_string())
}

/// Where the walk is: the JSON at this place (None: absent there) and its path.
struct Walk<'a> {
    read: Option<&'a Value>,
    at: String,
}

impl<'a> Walk<'a> {
    fn field(&self, key: &str) -> Walk<'a> {
        Walk {
            read: self.read.and_then(|v| v.get(key)),
            at: if self.at.is_empty() {
                key.to_string()
            } else {
                format!("{}.{key}", self.at)
            },
        }
    }

    fn object(self) -> Result<Object<'a>, Error> {
        match self.read {
            Some(v @ Value::Array(_)) => Err(fail(&self.at, v)),
            _ => Ok(Object { walk: self, key: None }),
        }
    }

    fn seq(self) -> Seq<'a> {
        Seq { walk: self, i: 0 }
    }
}

struct Object<'a> {
    walk: Walk<'a>,
    /// The key of a map entry, between `serialize_key` and `serialize_value`.
    key: Option<String>,
}

struct Seq<'a> {
    walk: Walk<'a>,
    i: usize,
}

impl Seq<'_> {
    fn element<T: ?Sized + Serialize>(&mut self, value: &T) -> Result<(), Error> {
        let w = Walk {
            read: self.walk.read.and_then(|v| v.get(self.i)),
            at: format!("{}[{}]", self.walk.at, self.i),
        };
        self.i += 1;
        value.serialize(w)
    }
}

macro_rules! leaves {
    ($($f:ident: $t:ty),*) => {
        $(fn $f(self, _: $t) -> Result<(), Error> { Ok(()) })*
    };
}

impl<'a> ser::Serializer for Walk<'a> {
    type Ok = ();
    type Error = Error;
    type SerializeSeq = Seq<'a>;
    type SerializeTuple = Seq<'a>;
    type SerializeTupleStruct = Seq<'a>;
    type SerializeTupleVariant = Seq<'a>;
    type SerializeMap = Object<'a>;
    type SerializeStruct = Object<'a>;
    type SerializeStructVariant = Object<'a>;

    leaves!(serialize_bool: bool, serialize_i8: i8, serialize_i16: i16, serialize_i32: i32, serialize_i64: i64,
        serialize_u8: u8, serialize_u16: u16, serialize_u32: u32, serialize_u64: u64, serialize_f32: f32,
        serialize_f64: f64, serialize_char: char, serialize_str: &str, serialize_bytes: &[u8],
        serialize_unit_struct: &'static str);

    fn serialize_none(self) -> Result<(), Error> {
        Ok(())
    }
    fn serialize_some<T: ?Sized + Serialize>(self, value: &T) -> Result<(), Error> {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result<(), Error> {
        Ok(())
    }
    fn serialize_unit_variant(self, _: &'static str, _: u32, _: &'static str) -> Result<(), Error> {
        Ok(())
    }
    fn serialize_newtype_struct<T: ?Sized + Serialize>(self, _: &'static str, value: &T) -> Result<(), Error> {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: ?Sized + Serialize>(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<(), Error> {
        value.serialize(self.field(variant))
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Seq<'a>, Error> {
        Ok(self.seq())
    }
    fn serialize_tuple(self, _: usize) -> Result<Seq<'a>, Error> {
        Ok(self.seq())
    }
    fn serialize_tuple_struct(self, _: &'static str, _: usize) -> Result<Seq<'a>, Error> {
        Ok(self.seq())
    }
    fn serialize_tuple_variant(self, _: &'static str, _: u32, v: &'static str, _: usize) -> Result<Seq<'a>, Error> {
        Ok(self.field(v).seq())
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Object<'a>, Error> {
        self.object()
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Object<'a>, Error> {
        self.object()
    }
    fn serialize_struct_variant(self, _: &'static str, _: u32, v: &'static str, _: usize) -> Result<Object<'a>, Error> {
        self.field(v).object()
    }
}

macro_rules! seq_impl {
    ($($tr:ident :: $m:ident),*) => {
        $(impl ser::$tr for Seq<'_> {
            type Ok = ();
            type Error = Error;
            fn $m<T: ?Sized + Serialize>(&mut self, value: &T) -> Result<(), Error> {
                self.element(value)
            }
            fn end(self) -> Result<(), Error> {
                Ok(())
            }
        })*
    };
}
seq_impl!(
    SerializeSeq::serialize_element,
    SerializeTuple::serialize_element,
    SerializeTupleStruct::serialize_field,
    SerializeTupleVariant::serialize_field
);

impl ser::SerializeMap for Object<'_> {
    type Ok = ();
    type Error = Error;
    fn serialize_key<T: ?Sized + Serialize>(&mut self, key: &T) -> Result<(), Error> {
        // Map keys are strings or numbers in JSON: their text is the key.
        self.key = Some(match serde_json::to_value(key)? {
            Value::String(s) => s,
            other => other.to_string(),
        });
        Ok(())
    }
    fn serialize_value<T: ?Sized + Serialize>(&mut self, value: &T) -> Result<(), Error> {
        let key = self.key.take().unwrap_or_default();
        value.serialize(self.walk.field(&key))
    }
    fn end(self) -> Result<(), Error> {
        Ok(())
    }
}

impl ser::SerializeStruct for Object<'_> {
    type Ok = ();
    type Error = Error;
    fn serialize_field<T: ?Sized + Serialize>(&mut self, key: &'static str, value: &T) -> Result<(), Error> {
        value.serialize(self.walk.field(key))
    }
    fn end(self) -> Result<(), Error> {
        Ok(())
    }
}

impl ser::SerializeStructVariant for Object<'_> {
    type Ok = ();
    type Error = Error;
    fn serialize_field<T: ?Sized + Serialize>(&mut self, key: &'static str, value: &T) -> Result<(), Error> {
        value.serialize(self.walk.field(key))
    }
    fn end(self) -> Result<(), Error> {
        Ok(())
    }
}

/// The keys of the top-level object, as they were read.
pub type Keys = RefCell<BTreeSet<String>>;

/// Reads `T` from `de`, refusing a sequence wherever `T` has a struct or a
/// map; with `keys`, the top-level object's keys are kept there (which
/// sections a report had: older reports lack some).
pub fn strict<'de, T: Deserialize<'de>, D: Deserializer<'de>>(de: D, keys: Option<&Keys>) -> Result<T, D::Error> {
    T::deserialize(Strict { de, keys })
}

/// The refusal, where a struct or map is read from an array.
const NOT_AN_OBJECT: &str = "is an array, not an object";

/// A deserializer that hands every value it reads to [`Wrap`], and every
/// nested deserializer to itself.
struct Strict<'k, D> {
    de: D,
    keys: Option<&'k Keys>,
}

/// A visitor that refuses a sequence where an object was asked for.
struct Wrap<'k, V> {
    v: V,
    object: bool,
    keys: Option<&'k Keys>,
}

impl<'k, D> Strict<'k, D> {
    fn wrap<V>(&self, v: V, object: bool) -> Wrap<'k, V> {
        Wrap {
            v,
            object,
            keys: self.keys,
        }
    }
}

macro_rules! forward_de {
    ($($m:ident),*) => {
        $(fn $m<V: Visitor<'de>>(self, v: V) -> Result<V::Value, D::Error> {
            let w = self.wrap(v, false);
            self.de.$m(w)
        })*
    };
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for Strict<'_, D> {
    type Error = D::Error;

    forward_de!(
        deserialize_any,
        deserialize_bool,
        deserialize_i8,
        deserialize_i16,
        deserialize_i32,
        deserialize_i64,
        deserialize_i128,
        deserialize_u8,
        deserialize_u16,
        deserialize_u32,
        deserialize_u64,
        deserialize_u128,
        deserialize_f32,
        deserialize_f64,
        deserialize_char,
        deserialize_str,
        deserialize_string,
        deserialize_bytes,
        deserialize_byte_buf,
        deserialize_option,
        deserialize_unit,
        deserialize_seq,
        deserialize_identifier,
        deserialize_ignored_any
    );

    fn deserialize_unit_struct<V: Visitor<'de>>(self, name: &'static str, v: V) -> Result<V::Value, D::Error> {
        let w = self.wrap(v, false);
        self.de.deserialize_unit_struct(name, w)
    }
    fn deserialize_newtype_struct<V: Visitor<'de>>(self, name: &'static str, v: V) -> Result<V::Value, D::Error> {
        let w = self.wrap(v, false);
        self.de.deserialize_newtype_struct(name, w)
    }
    fn deserialize_tuple<V: Visitor<'de>>(self, len: usize, v: V) -> Result<V::Value, D::Error> {
        let w = self.wrap(v, false);
        self.de.deserialize_tuple(len, w)
    }
    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        len: usize,
        v: V,
    ) -> Result<V::Value, D::Error> {
        let w = self.wrap(v, false);
        self.de.deserialize_tuple_struct(name, len, w)
    }
    fn deserialize_map<V: Visitor<'de>>(self, v: V) -> Result<V::Value, D::Error> {
        let w = self.wrap(v, true);
        self.de.deserialize_map(w)
    }
    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        v: V,
    ) -> Result<V::Value, D::Error> {
        let w = self.wrap(v, true);
        self.de.deserialize_struct(name, fields, w)
    }
    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        v: V,
    ) -> Result<V::Value, D::Error> {
        let w = self.wrap(v, false);
        self.de.deserialize_enum(name, variants, w)
    }
    fn is_human_readable(&self) -> bool {
        self.de.is_human_readable()
    }
}

macro_rules! forward_visit {
    ($($m:ident: $t:ty),*) => {
        $(fn $m<E: de::Error>(self, x: $t) -> Result<V::Value, E> {
            self.v.$m(x)
        })*
    };
}

impl<'k, V> Wrap<'k, V> {
    /// A top-level key (the only strings read with `keys` set).
    fn key(&self, s: &str) {
        if let Some(k) = self.keys {
            k.borrow_mut().insert(s.to_string());
        }
    }
}

impl<'de, V: Visitor<'de>> Visitor<'de> for Wrap<'_, V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.v.expecting(f)
    }

    forward_visit!(visit_bool: bool, visit_i8: i8, visit_i16: i16, visit_i32: i32, visit_i64: i64,
        visit_i128: i128, visit_u8: u8, visit_u16: u16, visit_u32: u32, visit_u64: u64, visit_u128: u128,
        visit_f32: f32, visit_f64: f64, visit_char: char, visit_bytes: &[u8], visit_borrowed_bytes: &'de [u8],
        visit_byte_buf: Vec<u8>);

    fn visit_str<E: de::Error>(self, s: &str) -> Result<V::Value, E> {
        self.key(s);
        self.v.visit_str(s)
    }
    fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> Result<V::Value, E> {
        self.key(s);
        self.v.visit_borrowed_str(s)
    }
    fn visit_string<E: de::Error>(self, s: String) -> Result<V::Value, E> {
        self.key(&s);
        self.v.visit_string(s)
    }
    fn visit_none<E: de::Error>(self) -> Result<V::Value, E> {
        self.v.visit_none()
    }
    fn visit_unit<E: de::Error>(self) -> Result<V::Value, E> {
        self.v.visit_unit()
    }
    fn visit_some<D: Deserializer<'de>>(self, de: D) -> Result<V::Value, D::Error> {
        self.v.visit_some(Strict { de, keys: None })
    }
    fn visit_newtype_struct<D: Deserializer<'de>>(self, de: D) -> Result<V::Value, D::Error> {
        self.v.visit_newtype_struct(Strict { de, keys: None })
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<V::Value, A::Error> {
        if self.object {
            return Err(de::Error::custom(NOT_AN_OBJECT));
        }
        self.v.visit_seq(Elements(seq))
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<V::Value, A::Error> {
        self.v.visit_map(Entries { map, keys: self.keys })
    }
    fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<V::Value, A::Error> {
        self.v.visit_enum(Variants(data))
    }
}

/// A seed whose deserializer is wrapped in [`Strict`].
struct Seed<'k, S> {
    seed: S,
    keys: Option<&'k Keys>,
}

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for Seed<'_, S> {
    type Value = S::Value;
    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<S::Value, D::Error> {
        self.seed.deserialize(Strict { de, keys: self.keys })
    }
}

fn seed<S>(seed: S) -> Seed<'static, S> {
    Seed { seed, keys: None }
}

struct Elements<A>(A);

impl<'de, A: SeqAccess<'de>> SeqAccess<'de> for Elements<A> {
    type Error = A::Error;
    fn next_element_seed<T: DeserializeSeed<'de>>(&mut self, s: T) -> Result<Option<T::Value>, A::Error> {
        self.0.next_element_seed(seed(s))
    }
    fn size_hint(&self) -> Option<usize> {
        self.0.size_hint()
    }
}

/// An object's entries; its keys are kept when `keys` is set (the top level).
struct Entries<'k, A> {
    map: A,
    keys: Option<&'k Keys>,
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for Entries<'_, A> {
    type Error = A::Error;
    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, s: K) -> Result<Option<K::Value>, A::Error> {
        self.map.next_key_seed(Seed {
            seed: s,
            keys: self.keys,
        })
    }
    fn next_value_seed<T: DeserializeSeed<'de>>(&mut self, s: T) -> Result<T::Value, A::Error> {
        self.map.next_value_seed(seed(s))
    }
    fn size_hint(&self) -> Option<usize> {
        self.map.size_hint()
    }
}

struct Variants<A>(A);

impl<'de, A: EnumAccess<'de>> EnumAccess<'de> for Variants<A> {
    type Error = A::Error;
    type Variant = Variant<A::Variant>;
    fn variant_seed<T: DeserializeSeed<'de>>(self, s: T) -> Result<(T::Value, Variant<A::Variant>), A::Error> {
        let (v, variant) = self.0.variant_seed(seed(s))?;
        Ok((v, Variant(variant)))
    }
}

struct Variant<A>(A);

impl<'de, A: VariantAccess<'de>> VariantAccess<'de> for Variant<A> {
    type Error = A::Error;
    fn unit_variant(self) -> Result<(), A::Error> {
        self.0.unit_variant()
    }
    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, s: T) -> Result<T::Value, A::Error> {
        self.0.newtype_variant_seed(seed(s))
    }
    fn tuple_variant<V: Visitor<'de>>(self, len: usize, v: V) -> Result<V::Value, A::Error> {
        self.0.tuple_variant(
            len,
            Wrap {
                v,
                object: false,
                keys: None,
            },
        )
    }
    fn struct_variant<V: Visitor<'de>>(self, fields: &'static [&'static str], v: V) -> Result<V::Value, A::Error> {
        self.0.struct_variant(
            fields,
            Wrap {
                v,
                object: true,
                keys: None,
            },
        )
    }
}

/// Reads a sequence of `T` whose derive flattens a struct into it (serde
/// reads that from buffered content, out of [`strict`]'s reach): each
/// element through a JSON value of its own (one element's worth of memory),
/// walked with [`check`].
pub fn checked_seq<'de, D: Deserializer<'de>, T: DeserializeOwned + Serialize>(d: D) -> Result<Vec<T>, D::Error> {
    struct Checked<T>(T);
    impl<'de, T: DeserializeOwned + Serialize> Deserialize<'de> for Checked<T> {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            let v = Value::deserialize(d)?;
            let t = T::deserialize(&v).map_err(de::Error::custom)?;
            check(&t, &v).map_err(de::Error::custom)?;
            Ok(Checked(t))
        }
    }
    struct Seq<T>(PhantomData<T>);
    impl<'de, T: DeserializeOwned + Serialize> Visitor<'de> for Seq<T> {
        type Value = Vec<T>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("an array")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<T>, A::Error> {
            let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
            while let Some(Checked(t)) = seq.next_element::<Checked<T>>()? {
                out.push(t);
            }
            Ok(out)
        }
    }
    d.deserialize_seq(Seq(PhantomData))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize, serde::Deserialize, Default)]
    struct Loss {
        #[serde(default)]
        drops: u64,
        #[serde(default)]
        lost: u64,
    }

    #[derive(Serialize, serde::Deserialize)]
    struct R {
        loss: Loss,
        rows: Vec<Loss>,
    }

    #[test]
    fn a_struct_read_from_an_array_is_refused_as_it_is_read() {
        let read = |text: &str| {
            let keys = Keys::default();
            let de = &mut serde_json::Deserializer::from_str(text);
            let mut track = serde_path_to_error::Track::new();
            let r: Result<R, _> = strict(serde_path_to_error::Deserializer::new(de, &mut track), Some(&keys));
            (
                r.map(|_| ()).map_err(|e| format!("`{}`: {e}", track.path())),
                keys.into_inner(),
            )
        };
        let (r, keys) = read(r#"{"loss": {"drops": 1}, "rows": [{"drops": 1, "lost": 2}]}"#);
        assert!(r.is_ok(), "{r:?}");
        assert_eq!(keys.into_iter().collect::<Vec<_>>(), ["loss", "rows"]);
        let (r, _) = read(r#"{"loss": [1], "rows": []}"#);
        let e = r.expect_err("refused");
        assert!(e.starts_with("`loss`: is an array, not an object"), "{e}");
        let (r, keys) = read(r#"{"rows": [{"drops": 1}, [2, 3]], "loss": {}}"#);
        let e = r.expect_err("refused");
        assert!(e.starts_with("`rows[1]`: is an array, not an object"), "{e}");
        assert_eq!(keys.into_iter().collect::<Vec<_>>(), ["rows"], "read up to the error");
    }

    #[test]
    fn a_struct_read_from_an_array_is_named() {
        let v = serde_json::json!({"loss": [1], "rows": [{"drops": 1}]});
        let r: R = serde_json::from_value(v.clone()).expect("serde reads [1] as a struct");
        assert_eq!(r.loss.drops, 1);
        let e = check(&r, &v).expect_err("refused");
        assert!(e.contains("`loss`: is [1], not an object"), "{e}");
        let v = serde_json::json!({"loss": {"drops": 1}, "rows": [{"drops": 1}, [2, 3]]});
        let r: R = serde_json::from_value(v.clone()).expect("serde reads it");
        let e = check(&r, &v).expect_err("refused");
        assert!(e.contains("`rows[1]`"), "{e}");
        let v = serde_json::json!({"loss": {"drops": 1}, "rows": []});
        let r: R = serde_json::from_value(v.clone()).expect("reads");
        assert!(check(&r, &v).is_ok());
    }
}
